"""Two claiming processes against one PostgreSQL and one Redis: never past D, never past R,
never one attempt claimed twice (seed A §2, §11, §14; the manual check "D = 2, R = 2 from two
routes").

Two OS processes (tests/support/claim_worker.py) loop claims over two routes of one runtime
instance, a second instance of the same owner and an instance of another owner, all sharing
the same agents. This test is the runtimes: woken by the workers' NOTIFY after every claim
call, it fences or releases every new claim, finishes or marks unknown some started ones,
keeps heartbeats fresh and queues a new run for each finished one, so claims keep succeeding.

A simulated runtime reports a task active from its start fence until just before its result
is committed, so every reported id is a live durable row (or the instance's constant manual
task); that makes the workers' sampled O exact (see claim_worker). The workers check the
invariants after every claim; this test then checks, from the events, that every claim a
worker got is exactly one ``attempt.claimed`` event and that no attempt was claimed again
before it was released.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from capacity.observations.redis_store import RedisObservationStore
from coordinator.domain import commands as c
from coordinator.service.transitions import Transitions
from kernel.db.migrate import upgrade
from services.bootstrap import Capacity, Coordinator
from tests.support.capacity import git_workspace, observe, open_capacity
from tests.support.databases import redis_test_url
from tests.support.factories import RUNTIME, SCHEDULER, spec

pytestmark = pytest.mark.redis

REDIS_URL = redis_test_url()
REPO = str(Path(__file__).resolve().parents[2])
CALLS_PER_WORKER = 1_000
WORKER_TIMEOUT_S = 150.0
TTL_MS = 10_000
CHANNEL = "truerun_claim_race"

LIMITS = {"o1": {"i1": 3, "i2": 2}, "o2": {"i3": 3}}  # owner -> instance -> D
OWNER_OF = {instance: owner for owner, limits in LIMITS.items() for instance in limits}
ROUTES = {"i1": ("dev-a", "dev-b"), "i2": ("dev-c",), "i3": ("dev-d",)}
MANUAL = {"i1": ("manual-i1",)}  # a task the runtime runs that no claim made
AGENTS = {"A": 2, "B": 2, "C": 1, "D": 1}  # agent -> R, shared by both owners
LANES: tuple[str | None, ...] = ("A", "B", "C", "D", None)
QUEUED_PER_OWNER = 30
TARGETS = [
    [("o1", "i1", "dev-a"), ("o1", "i2", "dev-c"), ("o2", "i3", "dev-d"), ("o1", "i1", "dev-b")],
    [("o1", "i1", "dev-b"), ("o2", "i3", "dev-d"), ("o1", "i1", "dev-a"), ("o1", "i2", "dev-c")],
]


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A key prefix of its own on the test database (db 15); its keys are deleted after."""
    client = Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except Exception as exc:  # refused, timed out, auth: all mean the same here
        await client.aclose()
        pytest.fail(
            f"Redis is required but unreachable at {REDIS_URL} "
            f"(set TRUERUN_TEST_REDIS_URL): {exc!r}",
            pytrace=False,
        )
    prefix = f"truerun:test:{uuid.uuid4().hex}"
    yield prefix
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


class Runtimes:
    """Every simulated runtime instance: what each runs, and what it reports."""

    def __init__(self, app: Coordinator, cap: Capacity, rng: random.Random) -> None:
        self._transitions: Transitions = app.transitions
        self._cap = cap
        self._rng = rng
        self.running: dict[str, set[str]] = {instance: set() for instance in OWNER_OF}
        self.counts: Counter[str] = Counter()

    async def heartbeat(self) -> None:
        for instance, owner in OWNER_OF.items():
            active = [*MANUAL.get(instance, ()), *sorted(self.running[instance])]
            limit = LIMITS[owner][instance]
            await observe(self._cap.reports, owner, instance, limit, active, ROUTES[instance])

    async def queue(self, owner: str, lane: str | None) -> None:
        n = self.counts["queued"]
        self.counts["queued"] += 1
        await self._transitions.create(spec(owner_id=owner, agent_id=lane, task_id=f"q{n}"))

    async def step(self, db: asyncpg.Connection) -> None:
        """Start or release every new claim, then finish or lose track of some started ones."""
        claimed = await db.fetch(
            "SELECT run_id, runtime_instance_id, runtime_task_id, lease_token FROM attempts "
            "WHERE status = 'claimed'"
        )
        for row in claimed:
            if self._rng.random() < 0.3:
                command: c.RunCommand = c.ReleaseBeforeFence(
                    row["run_id"], SCHEDULER, lease_token=row["lease_token"]
                )
                self.counts["released"] += 1
            else:
                command = c.StartFence(
                    row["run_id"],
                    SCHEDULER,
                    callback_token_hash="h",
                    lease_token=row["lease_token"],
                )
                self.running[row["runtime_instance_id"]].add(row["runtime_task_id"])
                self.counts["started"] += 1
            await self._transitions.execute(command)
        await self.heartbeat()
        started = await db.fetch(
            "SELECT id, run_id, owner_id, agent_id, runtime_instance_id, runtime_task_id, "
            "sync_state FROM attempts WHERE status IN ('starting', 'running')"
        )
        done = [row for row in started if self._rng.random() < 0.5]
        for row in done:  # reported gone first, then the result: a reported id is always live
            self.running[row["runtime_instance_id"]].discard(row["runtime_task_id"])
        await self.heartbeat()
        for row in done:
            await self._transitions.execute(
                c.RuntimeResult(row["run_id"], row["id"], row["runtime_task_id"], 1, RUNTIME)
            )
            self.counts["finished"] += 1
            await self.queue(row["owner_id"], row["agent_id"])
        finished = {row["id"] for row in done}
        for row in started:
            if (
                row["id"] not in finished
                and row["sync_state"] != "stale"
                and self._rng.random() < 0.1
            ):
                await self._transitions.execute(c.DispatchUnknown(row["run_id"], SCHEDULER))
                self.counts["unknown"] += 1


async def run_worker(config: dict[str, Any]) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.claim_worker",
        json.dumps(config),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), WORKER_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def simulate(db: asyncpg.Connection, runtimes: Runtimes, stop: asyncio.Event) -> int:
    """Step the runtimes once per wake-up (coalesced NOTIFYs) until ``stop``; the timeout only
    bounds how long heartbeats may go without a step, it never orders anything."""
    wake = asyncio.Event()
    await db.add_listener(CHANNEL, lambda *_: wake.set())
    steps = 0
    while not stop.is_set():
        try:
            await asyncio.wait_for(wake.wait(), TTL_MS / 4_000)
        except TimeoutError:
            pass
        wake.clear()
        await runtimes.step(db)
        steps += 1
    return steps


def claimed_twice(events: list[asyncpg.Record]) -> list[str]:
    """Attempts claimed again while their previous claim was neither released nor past it."""
    holding: set[str] = set()
    twice = []
    for event in events:
        attempt, kind = event["attempt_id"], event["type"]
        if kind == "attempt.claimed":
            if attempt in holding:
                twice.append(attempt)
            holding.add(attempt)
        elif kind == "attempt.released":
            holding.discard(attempt)
    return twice


async def test_two_processes_never_over_commit(
    pg_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    await upgrade(pg_url)
    observations = await RedisObservationStore.connect(REDIS_URL, key_prefix=redis_prefix)
    async with open_capacity(pg_url, ttl_ms=TTL_MS, observations=observations) as (app, cap):
        for agent, limit in AGENTS.items():
            workspace = git_workspace(tmp_path / agent)
            await cap.agents.configure(agent, limit, "git", workspace, 1)
        runtimes = Runtimes(app, cap, random.Random(7))
        for owner in LIMITS:
            for n in range(QUEUED_PER_OWNER):
                await runtimes.queue(owner, LANES[n % len(LANES)])
        await runtimes.heartbeat()

        base = {
            "db": pg_url,
            "redis": REDIS_URL,
            "prefix": redis_prefix,
            "ttl_ms": TTL_MS,
            "calls": CALLS_PER_WORKER,
            "limits": LIMITS,
            "agents": AGENTS,
            "channel": CHANNEL,
        }
        db = await asyncpg.connect(pg_url)
        try:
            stop = asyncio.Event()
            simulator = asyncio.ensure_future(simulate(db, runtimes, stop))
            try:
                results = await asyncio.gather(
                    *(
                        run_worker({**base, "targets": targets, "seed": n})
                        for n, targets in enumerate(TARGETS)
                    )
                )
            finally:
                stop.set()
                steps = await simulator
            events = await db.fetch(
                "SELECT attempt_id, type FROM run_events WHERE type IN "
                "('attempt.claimed', 'attempt.released') ORDER BY run_id, sequence"
            )
        finally:
            await db.close()

    calls = sum(r["calls"] for r in results)
    got = [tuple(pair) for r in results for pair in r["claimed"]]
    max_occupied = {
        k: max(r["max_occupied"].get(k, 0) for r in results) for k in ("o1/i1", "o1/i2", "o2/i3")
    }
    max_live = {a: max(r["max_live_per_agent"].get(a, 0) for r in results) for a in AGENTS}
    print(
        f"\nclaim race: {calls} claim calls, {sum(r['successful_calls'] for r in results)} "
        f"successful, {len(got)} attempts claimed; blocked "
        f"{dict(sum((Counter(r['blocked']) for r in results), Counter()))}; "
        f"runtime steps {steps}, {dict(runtimes.counts)}\n"
        f"  max O per instance {max_occupied} (D {LIMITS})\n"
        f"  max live per agent {max_live} (R {AGENTS})"
    )
    assert calls >= 2_000
    assert [v for r in results for v in r["violations"]] == []
    assert len(got) == len(set(got))  # no lease handed out twice
    claimed_events = [e["attempt_id"] for e in events if e["type"] == "attempt.claimed"]
    assert Counter(claimed_events) == Counter(attempt for attempt, _ in got)
    assert claimed_twice(events) == []
    assert all(
        max_occupied[f"{OWNER_OF[i]}/{i}"] <= d for o in LIMITS for i, d in LIMITS[o].items()
    )
    assert all(max_live[a] <= r for a, r in AGENTS.items())
    assert len(got) >= 500  # the runtimes kept slots free: the race was real
