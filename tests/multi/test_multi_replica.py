"""Issue #7, "Must show" 1: 3 coordinators, 2 capacity services, 2 reconcilers and 4
reference agents as real processes on loopback over PostgreSQL and Redis; clients
round-robin over the coordinators. TRUERUN_MULTI_RUNS runs (default 1,000) of short real
commands, random cancels, and one SIGKILL (then a restart) of a replica of each service
mid-way. Then: D and R never exceeded (sampled durable occupancy, and a side-effect log each
command appends its start and end to), no attempt started twice, every run terminal, every
run's event sequence gapless and no terminal event applied twice. The figures are printed.

A run whose coordinator was killed between its start fence and its Start is lost on the
runtime's "not found" (the truth: it never ran) and, not idempotent, waits for a person; the
test plays that person, checks the side-effect log, and resolves it "not started".
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import grpc
import pytest
from google.protobuf import struct_pb2
from truerun.v1 import (
    capacity_service_pb2,
    capacity_service_pb2_grpc,
    common_pb2,
    run_service_pb2,
    run_service_pb2_grpc,
)

from tests.integration.test_claim_race import REDIS_URL
from tests.support.auth import aio_channel
from tests.support.replicas import Deployment

if TYPE_CHECKING:
    from truerun.v1.run_service_pb2_grpc import RunServiceAsyncStub

pytestmark = [pytest.mark.multi, pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(900)]

RUNS = int(os.environ.get("TRUERUN_MULTI_RUNS", "1000"))
D = 3  # each agent's device limit
R = 1  # each configured agent's concurrency (R > 1 needs a git worktree per attempt)
# Half the runs name one of these agents (R each), the other half none. Six, not three: the
# named half drains through R x len(AGENTS) lanes, and with three it was most of the test's time.
AGENTS = tuple(f"ag-{i}" for i in range(6))
CANCEL_SHARE = 0.1
TERMINAL = ("succeeded", "failed", "cancelled", "timed_out")
USER = common_pb2.Actor(type=common_pb2.ACTOR_TYPE_USER, id="multi")


def _command(log: Path) -> str:
    """Appends its start and its end (also when a cancel TERMs it) to the side-effect log."""
    line = '"$TRUERUN_ATTEMPT_ID $(date +%s%N)"'
    end = f"echo end {line} >> {log}"
    return f"trap '{end}; exit 143' TERM; echo start {line} >> {log}; sleep 0.2 & wait $!; {end}"


@pytest.fixture
def deployment(pg_url: str, tmp_path: Path) -> Iterator[Deployment]:
    owner = f"multi-{uuid.uuid4().hex[:8]}"
    deployment = Deployment(
        tmp_path,
        pg_url,
        REDIS_URL,
        owner,
        settings={"TRUERUN_LEASE_TTL_MS": "15000", "TRUERUN_CANCEL_GRACE_MS": "1000"},
    )
    try:
        yield deployment
    finally:
        deployment.close()


async def _configure_agents(deployment: Deployment) -> None:
    async with aio_channel(f"127.0.0.1:{deployment.capacity_ports[0]}") as channel:
        stub = capacity_service_pb2_grpc.CapacityServiceStub(channel)
        for agent_id in AGENTS:
            await stub.ConfigureAgent(
                capacity_service_pb2.ConfigureAgentRequest(
                    agent=capacity_service_pb2.Agent(agent_id=agent_id, concurrency=R)
                ),
                timeout=30,
            )


async def _with_retries(call: object, *args: object) -> object:
    """A client call through the round-robin channel; a replica killed under it answers
    UNAVAILABLE, and the next try goes to another (every call used here is safe to repeat:
    creates carry a request id)."""
    for attempt in range(20):
        try:
            return await call(*args, timeout=30)  # type: ignore[operator]
        except grpc.aio.AioRpcError as error:
            if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("no coordinator answered")


class Sampler:
    """Polls the durable occupancy: live attempts per runtime instance and per agent."""

    def __init__(self, url: str, owner: str) -> None:
        self.url = url
        self.owner = owner
        self.max_per_instance: Counter[str] = Counter()
        self.max_per_agent: Counter[str] = Counter()
        self.samples = 0

    async def run(self, stop: asyncio.Event) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            while not stop.is_set():
                rows = await conn.fetch(
                    "SELECT runtime_instance_id, agent_id, count(*) AS n FROM attempts "
                    "WHERE owner_id = $1 AND status IN ('claimed', 'starting', 'running') "
                    "GROUP BY runtime_instance_id, agent_id",
                    self.owner,
                )
                per_instance: Counter[str] = Counter()
                per_agent: Counter[str] = Counter()
                for row in rows:
                    per_instance[row["runtime_instance_id"]] += row["n"]
                    if row["agent_id"]:
                        per_agent[row["agent_id"]] += row["n"]
                for key, n in per_instance.items():
                    self.max_per_instance[key] = max(self.max_per_instance[key], n)
                for key, n in per_agent.items():
                    self.max_per_agent[key] = max(self.max_per_agent[key], n)
                self.samples += 1
                await asyncio.sleep(0.2)
        finally:
            await conn.close()


def _overlaps(
    groups: dict[str, list[tuple[int, int]]], starts: dict[str, int], ends: dict[str, int]
) -> list[tuple[str, list[str]]]:
    """For a failure message: the attempts whose logged intervals overlap, per group."""
    by_start = {v: k for k, v in starts.items()}
    found = []
    for key, intervals in groups.items():
        ordered = sorted(intervals)
        for (s1, e1), (s2, _) in itertools.pairwise(ordered):
            if s2 < e1:
                a, b = by_start[s1], by_start[s2]
                found.append((key, [a, str(a in ends), b, str(b in ends)]))
    return found[:10]


def _max_overlap(intervals: list[tuple[int, int]]) -> int:
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in points:
        now += step
        best = max(best, now)
    return best


async def _create_all(stub: RunServiceAsyncStub, owner: str, log: Path) -> list[tuple[str, str]]:
    created: list[tuple[str, str]] = []
    semaphore = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        agent = AGENTS[i // 2 % len(AGENTS)] if i % 2 == 0 else ""
        spec = struct_pb2.Struct()
        spec.update({"command": _command(log)})
        request = run_service_pb2.CreateRunRequest(
            request_id=str(uuid.uuid4()),
            project_id="multi",
            owner_id=owner,
            task_id=f"task-{i}",
            agent_id=agent,
            spec=spec,
            actor=USER,
        )
        async with semaphore:
            response = await _with_retries(stub.CreateRun, request)
        assert isinstance(response, run_service_pb2.CreateRunResponse)
        created.append((response.run.id, agent))

    await asyncio.gather(*(one(i) for i in range(RUNS)))
    return created


async def _cancel_later(stub: RunServiceAsyncStub, run_id: str, delay: float) -> None:
    await asyncio.sleep(delay)
    request = run_service_pb2.CancelRunRequest(id=run_id, actor=USER)
    try:
        await _with_retries(stub.CancelRun, request)
    except grpc.aio.AioRpcError as error:  # already terminal: a cancel has nothing to stop
        assert error.code() is grpc.StatusCode.FAILED_PRECONDITION, error


async def _resolve_lost(
    stub: RunServiceAsyncStub, conn: asyncpg.Connection, owner: str, log: Path
) -> list[str]:
    """What a person does with a lost run: check the evidence, then resolve it with an audited
    command. A coordinator SIGKILLed between a start fence and its Start leaves an attempt
    whose runtime (the same live instance) then says "not found": lost, and these runs are
    not idempotent, so they wait for a person. The side-effect log must prove the command never
    ran (else the runtime's "not found" was a lie); then "not started" queues a new attempt."""
    rows = await conn.fetch(
        "SELECT r.id, a.id AS attempt_id, a.termination_reason FROM runs r "
        "JOIN attempts a ON a.id = r.current_attempt_id "
        "WHERE r.owner_id = $1 AND r.status = 'lost'",
        owner,
    )
    if not rows:
        return []
    started = {line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")}
    resolved = []
    for row in rows:
        assert row["termination_reason"] == "runtime_says_not_found", dict(row)
        assert row["attempt_id"] not in started, f"lost, but its command ran: {dict(row)}"
        request = run_service_pb2.ResolveRunRequest(
            request_id=f"resolve-{row['attempt_id']}",
            id=row["id"],
            actor=common_pb2.Actor(type=common_pb2.ACTOR_TYPE_OPERATOR, id="ops@multi"),
            reason="its Start never reached the runtime: the side-effect log has no start",
            resolution=run_service_pb2.RESOLUTION_NOT_STARTED,
        )
        await _with_retries(stub.ResolveRun, request)
        resolved.append(row["id"])
    return resolved


async def _terminal_count(conn: asyncpg.Connection, owner: str) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM runs WHERE owner_id = $1 AND status = ANY($2::text[])",
            owner,
            list(TERMINAL),
        )
    )


async def test_multi_replica(deployment: Deployment, pg_url: str) -> None:
    side_log = deployment.tmp / "side-effects.log"
    side_log.touch()
    began = time.monotonic()
    deployment.migrate()
    deployment.start(coordinators=3, capacities=2, reconcilers=2)
    await _configure_agents(deployment)
    for i in range(4):
        deployment.agent(i, D)
    ready = time.monotonic()
    conn = await asyncpg.connect(pg_url)
    sampler = Sampler(pg_url, deployment.owner)
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    rng = random.Random(7)
    kills: list[str] = []
    resolved: list[str] = []
    try:
        async with deployment.client_channel() as channel:
            stub = run_service_pb2_grpc.RunServiceStub(channel)
            created = await _create_all(stub, deployment.owner, side_log)
            created_at = time.monotonic()
            cancels = [
                asyncio.create_task(_cancel_later(stub, run_id, rng.uniform(0, 5)))
                for run_id, _ in created
                if rng.random() < CANCEL_SHARE
            ]
            # Mid-way: one replica of each service SIGKILLed, then started again.
            while await _terminal_count(conn, deployment.owner) < RUNS // 3:
                await asyncio.sleep(0.2)
            for kind in ("coordinator", "capacity", "reconciler"):
                deployment.replica(kind, 0).proc.kill()
                kills.append(f"{kind}-0 at {await _terminal_count(conn, deployment.owner)}")
                await asyncio.sleep(1.0)
                await asyncio.to_thread(deployment.launch, kind, 0)
            await asyncio.gather(*cancels)
            deadline = time.monotonic() + 600
            while (done := await _terminal_count(conn, deployment.owner)) < RUNS:
                resolved += await _resolve_lost(stub, conn, deployment.owner, side_log)
                if time.monotonic() > deadline:
                    stuck = await conn.fetch(
                        "SELECT r.id, r.status, a.status AS attempt, a.termination_reason "
                        "FROM runs r LEFT JOIN attempts a ON a.id = r.current_attempt_id "
                        "WHERE r.owner_id = $1 AND NOT r.status = ANY($2::text[]) LIMIT 20",
                        deployment.owner,
                        list(TERMINAL),
                    )
                    raise AssertionError(
                        f"{RUNS - done} runs not terminal: {stuck}; logs {deployment.logs()}"
                    )
                await asyncio.sleep(0.5)
            finished = time.monotonic()
        stop.set()
        await sampling
        await _check(conn, deployment, side_log, created, sampler, len(cancels))
        print(
            f"\nmulti-replica: {RUNS} runs through 3 coordinators, 2 capacity, 2 reconcilers, "
            f"4 agents (D={D}, R={R}); startup {ready - began:.1f}s, create "
            f"{created_at - ready:.1f}s, all terminal {finished - ready:.1f}s "
            f"({RUNS / (finished - ready):.1f} runs/s); SIGKILLed {kills}; lost before their "
            f"Start arrived (never ran) and resolved 'not started' by an operator: {resolved}"
        )
    finally:
        stop.set()
        await asyncio.gather(sampling, return_exceptions=True)
        await conn.close()


async def _check(
    conn: asyncpg.Connection,
    deployment: Deployment,
    side_log: Path,
    created: list[tuple[str, str]],
    sampler: Sampler,
    cancels: int,
) -> None:
    owner = deployment.owner
    statuses = Counter(
        dict(
            await conn.fetch(
                "SELECT status, count(*) FROM runs WHERE owner_id = $1 GROUP BY status", owner
            )
        )
    )
    assert sum(statuses.values()) == RUNS and set(statuses) <= set(TERMINAL), statuses
    # Gapless per-run event sequences, and no terminal event written twice.
    gaps = await conn.fetch(
        "SELECT r.id, count(e.*) AS n, min(e.sequence) AS lo, max(e.sequence) AS hi, "
        "count(DISTINCT e.sequence) AS distinct_n, r.event_sequence "
        "FROM runs r JOIN run_events e ON e.run_id = r.id WHERE r.owner_id = $1 "
        "GROUP BY r.id HAVING min(e.sequence) <> 1 OR max(e.sequence) <> count(e.*) "
        "OR count(DISTINCT e.sequence) <> count(e.*) OR max(e.sequence) <> r.event_sequence",
        owner,
    )
    assert not gaps, gaps[:5]
    twice = await conn.fetch(
        "SELECT e.run_id, e.type, count(*) FROM run_events e JOIN runs r ON r.id = e.run_id "
        "WHERE r.owner_id = $1 AND e.type = ANY($2::text[]) GROUP BY e.run_id, e.type "
        "HAVING count(*) > 1",
        owner,
        [f"run.{t}" for t in TERMINAL],
    )
    assert not twice, twice[:5]
    events = int(
        await conn.fetchval(
            "SELECT count(*) FROM run_events e JOIN runs r ON r.id = e.run_id "
            "WHERE r.owner_id = $1",
            owner,
        )
    )
    # The side effects: each attempt started at most once; D per runtime and R per agent.
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    started_twice = []
    for line in side_log.read_text().splitlines():
        kind, attempt_id, stamp = line.split()
        target = starts if kind == "start" else ends
        if attempt_id in target:
            started_twice.append(line)
        target[attempt_id] = int(stamp)
    assert not started_twice, started_twice[:5]
    placed = {
        row["id"]: (row["runtime_instance_id"], row["agent_id"])
        for row in await conn.fetch(
            "SELECT id, runtime_instance_id, agent_id FROM attempts WHERE owner_id = $1", owner
        )
    }
    per_instance: dict[str, list[tuple[int, int]]] = defaultdict(list)
    per_agent: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for attempt_id, start in starts.items():
        end = ends.get(attempt_id, time.time_ns())  # killed before its end line: still open
        instance, agent = placed[attempt_id]
        per_instance[instance].append((start, end))
        if agent:
            per_agent[agent].append((start, end))
    logged_d = {k: _max_overlap(v) for k, v in sorted(per_instance.items())}
    logged_r = {k: _max_overlap(v) for k, v in sorted(per_agent.items())}
    assert max(logged_d.values()) <= D, (logged_d, _overlaps(per_instance, starts, ends))
    assert max(logged_r.values()) <= R, (logged_r, _overlaps(per_agent, starts, ends))
    assert max(sampler.max_per_instance.values()) <= D, sampler.max_per_instance
    assert max(sampler.max_per_agent.values()) <= R, sampler.max_per_agent
    print(
        f"\nruns by status: {dict(statuses)}; cancels sent: {cancels}; events: {events}; "
        f"commands started: {len(starts)} (each once)"
        f"\nmax concurrent commands per runtime (side-effect log) {logged_d}, D={D}"
        f"\nmax concurrent commands per agent (side-effect log) {logged_r}, R={R}"
        f"\nmax durable occupancy per runtime over {sampler.samples} samples "
        f"{dict(sorted(sampler.max_per_instance.items()))}, per agent "
        f"{dict(sorted(sampler.max_per_agent.items()))}"
    )
