"""One claiming process of the claim race test (tests/integration/test_claim_race.py).

Run as ``python -m tests.support.claim_worker '<json config>'``. It opens the PostgreSQL store
and the Redis observation store exactly as a coordinator replica does, then loops ``calls``
claims over its targets (owner, instance, route). After every claim it samples the database
directly and checks the capacity invariants:

- device: for every instance of the claimed owner, O = |active_task_ids union live durable
  task ids| <= D. Read while holding the owner and instance advisory locks the claim takes (in the
  same order), so no claim is half-way while it reads;
- agent: live attempts per agent <= R (one statement: one consistent snapshot);
- identity: no runtime task id and no run is live on two attempts at once.

After each claim call it sends ``NOTIFY <channel>``, which drives the test's simulated
runtimes (no sleeps anywhere). It prints one JSON line: counts, the claimed (attempt id,
lease token) pairs, the maxima seen and every violation (an empty list when all held).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from capacity.observations.redis_store import RedisObservationStore
from capacity.service.claims import lock_keys
from kernel.ids import now_ms
from services.bootstrap import coordinator, open_store
from tests.support.capacity import LEASE_TTL_MS, LIVE_SQL, wire
from tests.support.factories import SCHEDULER

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
_DURABLE = (
    f"SELECT runtime_instance_id, runtime_task_id FROM attempts WHERE owner_id = $1 AND {LIVE_SQL}"
)
_PER_AGENT = f"SELECT agent_id, count(*) FROM attempts WHERE {LIVE_SQL} GROUP BY agent_id"
_TWICE = (
    f"SELECT 'task ' || runtime_task_id FROM attempts WHERE {LIVE_SQL} "
    "GROUP BY runtime_task_id HAVING count(*) > 1 "
    f"UNION ALL SELECT 'run ' || run_id FROM attempts WHERE {LIVE_SQL} "
    "GROUP BY run_id HAVING count(*) > 1"
)


@dataclass
class Figures:
    calls: int = 0
    successful_calls: int = 0
    claimed: list[tuple[str, str]] = field(default_factory=list)  # (attempt id, lease token)
    blocked: dict[str, int] = field(default_factory=dict)
    max_occupied: dict[str, int] = field(default_factory=dict)
    max_live_per_agent: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


async def check(
    db: asyncpg.Connection,
    observations: RedisObservationStore,
    config: dict[str, Any],
    owner: str,
    figures: Figures,
) -> None:
    limits: dict[str, int] = config["limits"][owner]
    async with db.transaction():
        for instance in sorted(limits):  # owner first, as every claim does (re-entrant)
            for key in lock_keys(owner, instance):
                await db.execute(_LOCK, key)
        durable: dict[str, set[str]] = {instance: set() for instance in limits}
        for row in await db.fetch(_DURABLE, owner):
            durable.setdefault(row[0], set()).add(row[1])
        for instance, limit in limits.items():
            obs = await observations.get(owner, instance, now_ms())
            active = set(obs.active_task_ids) if obs is not None else set()
            occupied = len(active | durable[instance])
            name = f"{owner}/{instance}"
            figures.max_occupied[name] = max(figures.max_occupied.get(name, 0), occupied)
            if occupied > limit:
                figures.violations.append(
                    f"{name}: O={occupied} > D={limit} (active {sorted(active)}, "
                    f"durable {sorted(durable[instance])})"
                )
    for agent, live in await db.fetch(_PER_AGENT):
        if agent is None:
            continue
        figures.max_live_per_agent[agent] = max(figures.max_live_per_agent.get(agent, 0), live)
        if live > config["agents"][agent]:
            figures.violations.append(f"agent {agent}: {live} live > R={config['agents'][agent]}")
    for (what,) in await db.fetch(_TWICE):
        figures.violations.append(f"live on two attempts at once: {what}")


async def main(config: dict[str, Any]) -> Figures:
    rng = random.Random(config["seed"])
    store = await open_store(config["db"])
    observations = await RedisObservationStore.connect(config["redis"], key_prefix=config["prefix"])
    db = await asyncpg.connect(config["db"])
    figures = Figures()
    try:
        cap = wire(coordinator(store), observations, config["ttl_ms"])
        targets = [tuple(target) for target in config["targets"]]
        for n in range(config["calls"]):
            owner, instance, device = targets[n % len(targets)]
            outcome = await cap.claims.claim(
                owner, instance, device, rng.randint(1, 3), LEASE_TTL_MS, SCHEDULER
            )
            figures.calls += 1
            figures.successful_calls += bool(outcome.claimed)
            reason = outcome.blocked.value or "none"
            figures.blocked[reason] = figures.blocked.get(reason, 0) + 1
            figures.claimed += [
                (i.attempt.id, i.attempt.lease_token or "") for i in outcome.claimed
            ]
            await check(db, observations, config, owner, figures)
            await db.execute(f"NOTIFY {config['channel']}")  # wakes the simulated runtimes
    finally:
        await db.close()
        await observations.close()
        await store.close()
    return figures


if __name__ == "__main__":
    result = asyncio.run(main(json.loads(sys.argv[1])))
    sys.stdout.write(json.dumps(result.__dict__) + "\n")
