"""The claim transaction (seed A §11): fresh observation -> owner lock -> runtime-instance lock
-> agent locks (sorted) -> scope locks (sorted) -> compare-and-set of every claimed attempt
through the coordinator's transition service, all in one transaction, all or nothing.

Redis (the observation) only says what the runtime reported; the durable rows read under the
locks are what stops over-commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from capacity.domain.occupancy import occupancy
from capacity.domain.planner import NO_AGENT, AgentBudget, Candidate, Plan, plan_claims
from capacity.observations.base import ObservationStore
from capacity.store.base import AgentConfig, CapacitySql, ClaimTx
from coordinator.domain import commands as c
from coordinator.domain.model import Actor, Attempt, Run
from coordinator.service.run_traces import run_trace_parent
from coordinator.service.transitions import Result, Transitions
from coordinator.store.base import RequestRecord
from coordinator.store.snapshots import Snapshot, run_from_snapshot, run_snapshot
from kernel import telemetry
from kernel.errors import InvalidArgument, VersionConflict
from kernel.ids import now_ms
from kernel.observation import Observation
from kernel.telemetry import span

#: R for an agent nobody configured: one live attempt at a time, the safe choice.
DEFAULT_AGENT_CONCURRENCY = 1
_CONTENTION_RETRIES = 3


class Blocked(StrEnum):
    NONE = ""
    NO_FRESH_OBSERVATION = "no_fresh_observation"
    INSTANCE_MISMATCH = "instance_mismatch"
    UNKNOWN_ROUTE = "unknown_route"
    DEVICE_FULL = "device_full"
    NOTHING_ELIGIBLE = "nothing_eligible"
    AGENT_LIMIT = "agent_limit"
    SCOPE_BUSY = "scope_busy"


@dataclass(frozen=True, slots=True)
class Claimed:
    run: Run
    attempt: Attempt
    workspace_path: str


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    claimed: tuple[Claimed, ...]
    blocked: Blocked = Blocked.NONE
    detail: str = ""


def outcome_snapshot(outcome: ClaimOutcome) -> Snapshot:
    """What a claim committed, for its AIP-155 record (coordinator/store/snapshots.py)."""
    return {
        "claimed": [
            {**run_snapshot(item.run, item.attempt), "workspace_path": item.workspace_path}
            for item in outcome.claimed
        ],
        "blocked": outcome.blocked.value,
        "detail": outcome.detail,
    }


def outcome_from_snapshot(snapshot: Snapshot) -> ClaimOutcome:
    claimed = []
    for item in snapshot["claimed"]:
        loaded = run_from_snapshot(item)
        assert loaded.attempt is not None, "a claim always has its attempt"
        claimed.append(Claimed(loaded.run, loaded.attempt, item["workspace_path"]))
    return ClaimOutcome(tuple(claimed), Blocked(snapshot["blocked"]), snapshot["detail"])


def lock_keys(owner: str, instance: str) -> list[str]:
    return [f"owner:{owner}", f"instance:{owner}:{instance}"]


def workspace_for(config: AgentConfig | None, attempt_id: str) -> str:
    """Agents with R > 1 work in a git worktree of their own per attempt (made by the runtime)."""
    if config is None or not config.workspace_path:
        return ""
    if config.concurrency > 1:
        return f"{config.workspace_path.rstrip('/')}/.truerun/worktrees/{attempt_id}"
    return config.workspace_path


class ClaimService:
    def __init__(
        self,
        sql: CapacitySql,
        observations: ObservationStore,
        transitions: Transitions,
        clock: Callable[[], int] = now_ms,
        on_timed: Callable[[str, float], None] | None = None,
    ) -> None:
        """``on_timed(result, seconds)``: each claim's time, by result ("claimed", else why
        nothing was: a Blocked value, a bounded label)."""
        self._sql = sql
        self._observations = observations
        self._transitions = transitions
        self._clock = clock
        self._on_timed = on_timed

    async def claim(
        self,
        owner: str,
        instance: str,
        device_id: str,
        max_claims: int,
        lease_ttl_ms: int,
        actor: Actor,
        request: RequestRecord | None = None,
        fence_hashes: Sequence[str] = (),
        projects: Sequence[str] | None = None,
    ) -> ClaimOutcome:
        """Claim up to ``max_claims`` queued runs for this runtime; ``request`` keeps the
        answer for AIP-155 replays in the same transaction. With ``fence_hashes`` (at least
        ``max_claims`` callback token hashes, distinct) every claimed attempt is also fenced
        in the same commit, the i-th with the i-th hash: the caller sends its Starts after
        the commit, and a Start that never left is proven so by a journaling runtime
        (docs/runtime-protocol.md). ``projects``: the projects the runtime's token serves
        (None: every project); no run of another project is claimed, whatever binding its
        creation saw (docs/tenancy.md)."""
        if fence_hashes and (
            len(fence_hashes) < max_claims or len(set(fence_hashes)) != len(fence_hashes)
        ):
            raise InvalidArgument("a fenced claim needs max_claims distinct callback token hashes")
        attributes = {"truerun.owner_id": owner, "truerun.runtime_instance_id": instance}
        began = time.time_ns()
        with span("capacity claim", attributes) as current:
            outcome = await self._claim(
                owner,
                instance,
                device_id,
                max_claims,
                lease_ttl_ms,
                actor,
                request,
                fence_hashes,
                projects,
            )
        if self._on_timed is not None:
            result = "claimed" if outcome.claimed else outcome.blocked.value or "none"
            self._on_timed(result, (time.time_ns() - began) / 1e9)
            current.set_attribute("truerun.claimed", len(outcome.claimed))
            current.set_attribute("truerun.blocked", str(outcome.blocked))
        for item in outcome.claimed:  # each claimed run's own trace gets the claim too
            parent = await run_trace_parent(self._transitions.reader, item.run.id)
            telemetry.record(
                "capacity claimed",
                parent,
                began,
                {
                    **attributes,
                    "truerun.run_id": item.run.id,
                    "truerun.attempt_id": item.attempt.id,
                },
            )
        return outcome

    async def _claim(
        self,
        owner: str,
        instance: str,
        device_id: str,
        max_claims: int,
        lease_ttl_ms: int,
        actor: Actor,
        request: RequestRecord | None,
        fence_hashes: Sequence[str],
        projects: Sequence[str] | None,
    ) -> ClaimOutcome:
        observation = await self._observations.get(owner, instance, self._clock())
        if observation is None:
            return ClaimOutcome(
                (),
                Blocked.NO_FRESH_OBSERVATION,
                f"no fresh capacity observation from runtime {instance}; claims wait for its "
                "next heartbeat",
            )
        if observation.runtime_instance_id != instance or observation.owner_id != owner:
            return ClaimOutcome((), Blocked.INSTANCE_MISMATCH, "observation names another runtime")
        if device_id not in {route.device_id for route in observation.routes}:
            return ClaimOutcome(
                (), Blocked.UNKNOWN_ROUTE, f"runtime {instance} reported no route {device_id!r}"
            )
        for _ in range(_CONTENTION_RETRIES):
            try:
                return await self._claim_locked(
                    observation,
                    device_id,
                    max_claims,
                    lease_ttl_ms,
                    actor,
                    request,
                    fence_hashes,
                    projects,
                )
            except VersionConflict:
                continue  # a candidate changed under us (cancelled, say); plan again
        return ClaimOutcome((), Blocked.NOTHING_ELIGIBLE, "queue kept changing; try again")

    async def _claim_locked(
        self,
        obs: Observation,
        device_id: str,
        max_claims: int,
        lease_ttl_ms: int,
        actor: Actor,
        request: RequestRecord | None,
        fence_hashes: Sequence[str],
        projects: Sequence[str] | None,
    ) -> ClaimOutcome:
        owner, instance = obs.owner_id, obs.runtime_instance_id
        results: list[Result] = []
        claimed: list[Claimed] = []
        async with self._transitions.transaction(lock_keys(owner, instance)) as tx:
            durable = await self._sql.durable_task_ids(tx, owner, instance)
            occ = occupancy(obs.limit, obs.active_task_ids, durable)
            if occ.free_slots == 0:
                detail = f"O={occ.occupied} of D={obs.limit} (runtime {occ.runtime_active}, "
                detail += f"durable-only {len(occ.durable_only_task_ids)})"
                full = ClaimOutcome((), Blocked.DEVICE_FULL, detail)
                if request is not None:
                    await self._transitions.record_request_in(tx, request, outcome_snapshot(full))
                return full
            slots = min(max_claims, occ.free_slots)
            lanes = await self._sql.lanes_with_work(tx, owner)
            heads = await self._sql.lane_heads(
                tx, owner, instance, lanes, slots, obs.labels, projects
            )
            plan, configs = await self._plan(tx, owner, slots, heads)
            chains: list[list[c.RunCommand]] = []
            for i, candidate in enumerate(plan.picked):
                claim = c.Claim(
                    candidate.run_id,
                    actor,
                    runtime_instance_id=instance,
                    runtime_device_id=device_id,
                    lease_ttl_ms=lease_ttl_ms,
                )
                commands: list[c.RunCommand] = [claim]
                if fence_hashes:  # the lease check is moot: the fence is in the claim's write
                    fence = c.StartFence(
                        candidate.run_id, actor, callback_token_hash=fence_hashes[i]
                    )
                    commands.append(fence)
                chains.append(commands)
            if chains:
                label = "ClaimAndFence" if fence_hashes else "Claim"
                results = await self._transitions.execute_chains_in(tx, chains, label)
            for candidate, result in zip(plan.picked, results, strict=True):
                assert result.attempt is not None
                config = configs.get(candidate.agent_key)
                claimed.append(
                    Claimed(result.run, result.attempt, workspace_for(config, result.attempt.id))
                )
            if plan.picked:
                await self._sql.save_fairness(tx, owner, plan.clock, plan.vtimes)
            blocked, detail = _why_short(plan, slots, max_claims, occ.free_slots)
            if blocked is Blocked.NOTHING_ELIGIBLE and await self._sql.waits_for_a_scope(tx, owner):
                blocked, detail = Blocked.SCOPE_BUSY, "queued work waits for its execution scope"
            outcome = ClaimOutcome(tuple(claimed), blocked, detail)
            if request is not None:
                await self._transitions.record_request_in(tx, request, outcome_snapshot(outcome))
        self._transitions.published(results)
        return outcome

    async def _plan(
        self, tx: ClaimTx, owner: str, slots: int, heads: list[Candidate]
    ) -> tuple[Plan, dict[str, AgentConfig]]:
        """Plan from unlocked reads, then lock only what the plan picked (agents, then scopes,
        each sorted: one global order, so claims never deadlock) and check it again under
        those locks. A plan that no longer holds raises VersionConflict and is made again.
        Locks stay O(claims), not O(agents with work)."""
        agents = sorted({h.agent_key for h in heads} - {NO_AGENT})
        configs = await self._sql.agent_configs(tx, agents)
        live = await self._sql.live_per_agent(tx, agents)
        scopes = sorted({s for h in heads if (s := h.execution_scope) is not None})
        busy = await self._sql.busy_scopes(tx, scopes)
        lanes = sorted({h.agent_key for h in heads})
        clock, vtimes = await self._sql.fairness(tx, owner, lanes)
        budgets = {
            NO_AGENT: AgentBudget(remaining=1 << 30, vtime=vtimes.get(NO_AGENT, 0)),
        }
        for agent in agents:
            budgets[agent] = AgentBudget(
                remaining=_limit(configs.get(agent)) - live.get(agent, 0),
                weight=config.fairness_weight if (config := configs.get(agent)) else 1,
                vtime=vtimes.get(agent, 0),
            )
        plan = plan_claims(slots, heads, budgets, frozenset(busy), clock)
        await self._confirm_under_locks(tx, plan, configs)
        return plan, configs

    async def _confirm_under_locks(
        self, tx: ClaimTx, plan: Plan, configs: dict[str, AgentConfig]
    ) -> None:
        wanted: dict[str, int] = {}
        for candidate in plan.picked:
            if candidate.agent_key != NO_AGENT:
                wanted[candidate.agent_key] = wanted.get(candidate.agent_key, 0) + 1
        scopes = sorted({s for c in plan.picked if (s := c.execution_scope) is not None})
        agents = sorted(wanted)
        await tx.lock([f"agent:{a}" for a in agents] + [f"scope:{s}" for s in scopes])
        live = await self._sql.live_per_agent(tx, agents)
        over = [a for a in agents if live.get(a, 0) + wanted[a] > _limit(configs.get(a))]
        busy = await self._sql.busy_scopes(tx, scopes)
        if over or busy:
            raise VersionConflict(f"claim plan outdated (agents {over}, scopes {sorted(busy)})")


def _limit(config: AgentConfig | None) -> int:
    return config.concurrency if config else DEFAULT_AGENT_CONCURRENCY


def _why_short(plan: Plan, slots: int, asked: int, free: int) -> tuple[Blocked, str]:
    if len(plan.picked) == asked:
        return Blocked.NONE, ""
    if len(plan.picked) == slots and slots < asked:
        return Blocked.DEVICE_FULL, f"{free} free slot(s) on the device"
    if plan.blocked_by_agent:
        return Blocked.AGENT_LIMIT, "an agent with queued work is at its concurrency R"
    if plan.blocked_by_scope:
        return Blocked.SCOPE_BUSY, "queued work waits for its execution scope"
    return Blocked.NOTHING_ELIGIBLE, "no queued run this runtime may take"
