"""The fair claim order and the agent / scope gates, as a pure planning step.

Order: "run now" first, then higher priority; within one (run now, priority) class the agents
take turns by start-time fair queueing: an agent's next item starts at max(its virtual time,
the owner's virtual clock V); the smallest start goes next; serving it sets V to that start
and advances the agent by TURN / weight. An agent that was idle therefore rejoins at V and
cannot hoard turns, and a weight-2 agent gets twice the turns of a weight-1 agent. Inside
one agent, oldest first.
The caller supplies each agent's oldest eligible items (not a global first-N window), so a
hot agent with thousands queued cannot starve one with a single item.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

NO_AGENT = ""  # runs without an agent (automations) share one fairness lane
TURN = 1_000_000  # virtual time of one claim at weight 1 (integers: both databases agree)


@dataclass(frozen=True, slots=True)
class Candidate:
    run_id: str
    agent_key: str  # agent_id, or NO_AGENT
    priority: int
    run_now: bool
    queued_at_ms: int
    execution_scope: str | None

    @property
    def order_class(self) -> tuple[bool, int]:
        return (self.run_now, self.priority)

    @property
    def fifo_key(self) -> tuple[int, str]:
        return (self.queued_at_ms, self.run_id)


@dataclass(frozen=True, slots=True)
class AgentBudget:
    """How many more live attempts the agent may have (R minus its live attempts anywhere),
    its fairness weight and its virtual time."""

    remaining: int
    weight: int = 1
    vtime: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    picked: tuple[Candidate, ...]
    vtimes: dict[str, int] = field(default_factory=dict)  # new virtual times to store
    clock: int = 0  # the owner's virtual clock V after this plan
    blocked_by_agent: bool = False
    blocked_by_scope: bool = False


UNLIMITED = AgentBudget(remaining=1 << 30)


def plan_claims(
    slots: int,
    candidates: Sequence[Candidate],
    budgets: Mapping[str, AgentBudget],
    busy_scopes: frozenset[str],
    clock: int = 0,
) -> Plan:
    """Pick up to ``slots`` candidates in fair order, never past an agent's R or a busy scope.

    ``candidates`` holds, per agent, its oldest queued items (any order); agents missing from
    ``budgets`` are unlimited (the NO_AGENT lane)."""
    lanes: dict[str, list[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: (not c.run_now, -c.priority, c.fifo_key)):
        lanes.setdefault(candidate.agent_key, []).append(candidate)
    remaining = {key: budgets.get(key, UNLIMITED).remaining for key in lanes}
    vtimes = {key: budgets.get(key, UNLIMITED).vtime for key in lanes}
    scopes = set(busy_scopes)
    picked: list[Candidate] = []
    blocked_agent = blocked_scope = False
    while len(picked) < slots:
        heads = _heads(lanes, remaining, scopes)
        blocked_agent |= any(lanes[k] and remaining[k] <= 0 for k in lanes)
        blocked_scope |= any(
            c.execution_scope in scopes for lane in lanes.values() for c in lane[:1]
        )
        if not heads:
            break
        best_class = max(c.order_class for c in heads.values())
        contenders = {k: c for k, c in heads.items() if c.order_class == best_class}
        key = min(contenders, key=lambda k: (max(vtimes[k], clock), contenders[k].fifo_key))
        chosen = contenders[key]
        clock = max(vtimes[key], clock)
        picked.append(chosen)
        lanes[key].remove(chosen)
        remaining[key] -= 1
        weight = max(1, budgets.get(key, UNLIMITED).weight)
        vtimes[key] = clock + TURN // weight
        if chosen.execution_scope is not None:
            scopes.add(chosen.execution_scope)
    changed = {k: v for k, v in vtimes.items() if v != budgets.get(k, UNLIMITED).vtime}
    return Plan(tuple(picked), changed, clock, blocked_agent, blocked_scope)


def _heads(
    lanes: Mapping[str, list[Candidate]], remaining: Mapping[str, int], scopes: set[str]
) -> dict[str, Candidate]:
    """Each agent's first item that its budget and the busy scopes allow."""
    heads: dict[str, Candidate] = {}
    for key, lane in lanes.items():
        if remaining[key] <= 0:
            continue
        for candidate in lane:
            if candidate.execution_scope is None or candidate.execution_scope not in scopes:
                heads[key] = candidate
                break
    return heads
