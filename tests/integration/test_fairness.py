"""Fair claim order on SQLite and on real PostgreSQL (seed A §11, §14 "单机器人达到 R").

Within one priority the agents take turns and, inside an agent, the oldest goes first. A hot
agent with thousands queued cannot starve one with a single run (no fixed candidate window);
over windows where every agent still has demand, the claims per agent are equal (Jain's index
~1); a weight-2 agent gets twice the turns of a weight-1 agent. Claims are one at a time and
every claimed attempt is finished at once, so neither D nor R is ever what decides.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from coordinator.domain import commands as c
from services.bootstrap import Capacity, Coordinator
from tests.support.capacity import claim, finish, git_workspace, observe, open_capacity
from tests.support.factories import spec

OWNER = "alice"
LIMIT = 1_000  # D: never the constraint here
R = 1_000  # every agent's R: never the constraint here
CREATE_CONCURRENCY = 8


@pytest.fixture
async def wired(migrated_database_url: str) -> AsyncIterator[tuple[Coordinator, Capacity]]:
    async with open_capacity(migrated_database_url) as (app, cap):
        await observe(cap.reports, OWNER, "i1", LIMIT)
        yield app, cap


async def create_all(app: Coordinator, specs: Sequence[c.RunSpec]) -> None:
    """Create the runs in the given order per agent (a few at once: only the FIFO inside an
    agent matters, and runs of one agent are created one after another)."""
    by_agent: dict[str | None, list[c.RunSpec]] = {}
    for item in specs:
        by_agent.setdefault(item.agent_id, []).append(item)
    lanes = list(by_agent.values())
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def lane(items: list[c.RunSpec]) -> None:
        for item in items:
            async with gate:
                await app.transitions.create(item)

    await asyncio.gather(*(lane(items) for items in lanes))


async def configure(cap: Capacity, tmp_path: Path, agents: Sequence[str], weight: int = 1) -> None:
    for agent in agents:
        await cap.agents.configure(agent, R, "git", git_workspace(tmp_path / agent), weight)


async def claim_one(app: Coordinator, cap: Capacity) -> str:
    """Claim one run, finish it at once (its slot is free again) and name its agent."""
    outcome = await claim(cap, OWNER, "i1", max_claims=1)
    assert len(outcome.claimed) == 1, outcome
    await finish(app.transitions, outcome.claimed[0])
    return outcome.claimed[0].run.agent_id or ""


def jain(counts: Sequence[int]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one gets everything."""
    return sum(counts) ** 2 / (len(counts) * sum(x * x for x in counts))


async def test_a_hot_agent_cannot_starve_an_agent_with_one_run(
    wired: tuple[Coordinator, Capacity], migrated_database_url: str, tmp_path: Path
) -> None:
    app, cap = wired
    hot = 5_000 if migrated_database_url.startswith("postgresql://") else 500
    await configure(cap, tmp_path, ["A", "B"])
    await create_all(app, [spec(agent_id="A", task_id=f"a{n}") for n in range(hot)])
    await app.transitions.create(spec(agent_id="B", task_id="b0"))

    first_two = [await claim_one(app, cap) for _ in range(2)]
    assert "B" in first_two, first_two

    # After A had the device to itself for a while, B's next run still gets the next turn.
    assert [await claim_one(app, cap) for _ in range(10)] == ["A"] * 10
    await app.transitions.create(spec(agent_id="B", task_id="b1"))
    assert "B" in [await claim_one(app, cap) for _ in range(2)]
    print(f"\nstarvation: A queued {hot}, B's run claimed within the first 2 claims")


async def test_jain_index_across_50_agents(
    wired: tuple[Coordinator, Capacity], tmp_path: Path
) -> None:
    app, cap = wired
    rng = random.Random(20_261_129)
    agents = [f"agent-{n:02d}" for n in range(50)]
    queued = {agent: rng.randint(6, 20) for agent in agents}
    specs = [spec(agent_id=a, task_id=f"{a}-{n}") for a in agents for n in range(queued[a])]
    rng.shuffle(specs)  # interleaved arrivals; FIFO inside each agent is kept by create_all
    await configure(cap, tmp_path, agents)
    await create_all(app, specs)

    claimed: list[str] = []
    left = dict(queued)
    while all(left.values()):  # the window where every agent still has demand
        agent = await claim_one(app, cap)
        claimed.append(agent)
        left[agent] -= 1

    # Whole rounds of the window (the last, partial round would count some agents once less).
    whole = claimed[: len(claimed) - len(claimed) % len(agents)]
    index = jain([Counter(whole)[agent] for agent in agents])
    rounds = [whole[i : i + len(agents)] for i in range(0, len(whole), len(agents))]
    per_round = [jain([Counter(r)[agent] for agent in agents]) for r in rounds]
    raw = jain([Counter(claimed)[agent] for agent in agents])
    print(
        f"\nJain: {len(claimed)} claims over {len(agents)} agents while all had demand "
        f"(queues {min(queued.values())}..{max(queued.values())}): index {index:.4f} over "
        f"{len(rounds)} whole rounds, min per {len(agents)}-claim window {min(per_round):.4f}, "
        f"{raw:.4f} with the partial round"
    )
    assert index >= 0.99
    assert min(per_round) >= 0.99
    assert len(rounds) == min(queued.values()) - 1  # the shortest queue ran dry in its last round


async def test_weight_2_agent_gets_twice_the_claims(
    wired: tuple[Coordinator, Capacity], tmp_path: Path
) -> None:
    app, cap = wired
    await configure(cap, tmp_path, ["heavy"], weight=2)
    await configure(cap, tmp_path, ["light"], weight=1)
    specs = [spec(agent_id=a, task_id=f"{a}-{n}") for n in range(90) for a in ("light", "heavy")]
    await create_all(app, specs)

    counts = Counter([await claim_one(app, cap) for _ in range(90)])
    print(f"\nweights 2:1 over 90 claims: heavy {counts['heavy']}, light {counts['light']}")
    assert abs(counts["heavy"] - 60) <= 1 and counts["heavy"] + counts["light"] == 90
