"""Claim latency through ``ClaimService.claim`` on PostgreSQL as the queue grows.

One owner's queue is seeded with 1k, 10k and 100k queued runs spread uniformly (round-robin)
over 1,000 agents, each configured with a concurrency R that never binds; one runtime
instance reports an observation with a device limit D that never binds. At each size the
benchmark makes single claims (``max_attempts=1``) one after another and times each
``ClaimService.claim`` call; every claimed attempt is released at once (``ReleaseBeforeFence``
through ``Transitions.execute``, outside the timer), so the queue keeps its size while it is
measured. The final line compares the largest size with the smallest: a claim should cost
O(agents), not O(queue).

    .venv/bin/python -m bench.claim --sizes 1000,10000,100000 --agents 1000 --calls 300

Runs are seeded with the rows the domain makes (``decide(CreateRun)`` -> ``run_values`` /
``attempt_values`` / the store's event arrays) and bulk-loaded with COPY; see bench/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import uvloop

from bench.transition import _progress
from capacity.observations.memory import MemoryObservationStore
from capacity.service.claims import Blocked
from capacity.store.base import AgentConfig
from capacity.store.postgres import _HEADS, _LANES, PostgresCapacitySql
from coordinator.domain import commands as c
from coordinator.domain.decide import Context, Decision, decide
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service.transitions import Transitions
from coordinator.store.postgres import PostgresStore
from coordinator.store.rows import (
    ATTEMPT_COLUMNS,
    EVENT_COLUMNS,
    RUN_COLUMNS,
    attempt_values,
    run_values,
)
from coordinator.store.sql import events_from_decision
from kernel.db.migrate import upgrade
from kernel.ids import new_token, now_ms, uuid7
from kernel.observation import Observation, Route
from services.bootstrap import Capacity, Coordinator, capacity, coordinator, open_store
from tests.support.databases import create_pg_database, drop_pg_database

OWNER = "owner-1"
INSTANCE = "runtime-instance-1"
DEVICE = "device-1"
PROJECT = "bench"
CREATOR = Actor(ActorType.USER, "bench-user")
ACTOR = Actor(ActorType.SCHEDULER, f"capacity:{INSTANCE}")  # what the Claim RPC passes
AGENT_R = 1000  # capacity.service.agents.MAX_CONCURRENCY; live attempts never exceed 1
DEVICE_D = 1000
LEASE_TTL_MS = 30_000
OBSERVATION_TTL_MS = 60_000
REFERENCE_OWNER = "owner-reference"  # the seeding check's run; never in the measured queue


# -- seeding ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rows:
    """The rows the store writes for one CreateRun decision, in COPY column order."""

    run: tuple[Any, ...]
    attempt: tuple[Any, ...]
    events: list[tuple[Any, ...]]


def rows_for(decision: Decision) -> Rows:
    """What ``PostgresStore.apply`` inserts for a (run INSERT, attempt INSERT) decision: the
    run row with ``event_sequence`` = number of events, the attempt row, and one event row
    per event from the same arrays the store binds (sequence 1..n, no dedupe key)."""
    assert decision.attempt is not None, "a queued run has an attempt"
    run = run_values(decision.run)
    run["event_sequence"] = len(decision.events)
    attempt = attempt_values(decision.attempt)
    ev = events_from_decision(decision)
    events = []
    for k in range(ev["n_events"]):
        row = {
            "id": ev["ev1"][k],
            "run_id": decision.run.id,
            "sequence": k + 1,
            "type": ev["ev2"][k],
            "dedupe_key": None,
            "actor_type": ev["ev3"][k],
            "actor_id": ev["ev4"][k],
            "attempt_id": ev["ev5"][k],
            "payload": ev["ev6"][k],
            "created_at_ms": ev["created"],
            "project_id": decision.run.project_id,
        }
        events.append(tuple(row[col] for col in EVENT_COLUMNS))
    return Rows(
        tuple(run[col] for col in RUN_COLUMNS),
        tuple(attempt[col] for col in ATTEMPT_COLUMNS),
        events,
    )


def agent_ids(agents: int) -> list[str]:
    width = len(str(agents - 1))
    return [f"agent-{i:0{width}d}" for i in range(agents)]


def spec_for(owner: str, agent: str) -> c.RunSpec:
    return c.RunSpec(
        project_id=PROJECT,
        owner_id=owner,
        task_id=f"task-{agent}",
        created_by=CREATOR,
        agent_id=agent,
    )


def created(start: int, stop: int, agents: Sequence[str], base_ms: int) -> Iterator[Rows]:
    """Runs number ``start`` .. ``stop - 1``: run j belongs to agent j mod len(agents) and was
    created (and queued) at ``base_ms + j``."""
    specs = [spec_for(OWNER, agent) for agent in agents]
    for j in range(start, stop):
        ctx = Context(now_ms=base_ms + j, new_id=uuid7, new_token=new_token)
        yield rows_for(decide(c.CreateRun(specs[j % len(specs)]), None, None, ctx))


async def copy_rows(pool: asyncpg.Pool, rows: Sequence[Rows]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.copy_records_to_table(
            "runs", records=[r.run for r in rows], columns=list(RUN_COLUMNS)
        )
        await conn.copy_records_to_table(
            "attempts", records=[r.attempt for r in rows], columns=list(ATTEMPT_COLUMNS)
        )
        await conn.copy_records_to_table(
            "run_events",
            records=[e for r in rows for e in r.events],
            columns=list(EVENT_COLUMNS),
        )


async def seed(
    pool: asyncpg.Pool, start: int, stop: int, agents: Sequence[str], base_ms: int
) -> None:
    chunk = 20_000
    for lo in range(start, stop, chunk):
        await copy_rows(pool, list(created(lo, min(stop, lo + chunk), agents, base_ms)))
    await pool.execute("VACUUM (ANALYZE) runs, attempts, run_events")


async def check_seeding(app: Coordinator, pool: asyncpg.Pool) -> None:
    """Create one run through ``Transitions.create`` and compare the rows it wrote with the
    rows ``rows_for`` builds for the same spec, clock and ids (event ids aside: uuid7 in both).
    The run belongs to another owner and is deleted afterwards."""
    at = now_ms()

    def ids() -> Callable[[], str]:
        return iter(["bench-reference-run", "bench-reference-attempt"]).__next__

    spec = spec_for(REFERENCE_OWNER, "agent-reference")
    await Transitions(app.store, clock=lambda: at, new_id=ids()).create(spec)
    expected = rows_for(decide(c.CreateRun(spec), None, None, Context(at, ids(), new_token)))
    run_id = expected.run[RUN_COLUMNS.index("id")]
    runs = await pool.fetch(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = $1", run_id)
    attempts = await pool.fetch(
        f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE run_id = $1", run_id
    )
    events = await pool.fetch(
        f"SELECT {', '.join(EVENT_COLUMNS)} FROM run_events WHERE run_id = $1 ORDER BY sequence",
        run_id,
    )
    skip = EVENT_COLUMNS.index("id")

    def without_id(row: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(v for i, v in enumerate(row) if i != skip)

    same = (
        [tuple(r) for r in runs] == [expected.run]
        and [tuple(a) for a in attempts] == [expected.attempt]
        and [without_id(e) for e in events] == [without_id(e) for e in expected.events]
    )
    if not same:
        raise RuntimeError("seeded rows differ from what Transitions.create writes")
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM run_events WHERE run_id = $1", run_id)
        await conn.execute("DELETE FROM attempts WHERE run_id = $1", run_id)
        await conn.execute("DELETE FROM runs WHERE id = $1", run_id)


async def configure_agents(
    store: PostgresStore, sql: PostgresCapacitySql, agents: Sequence[str]
) -> None:
    """R = AGENT_R for every agent (put_agent directly: AgentService.configure would ask for
    a git work tree when R > 1), and a fairness lane at virtual time 0 for each, which plans
    exactly like no row at all but makes the fairness reads cost what they cost once every
    lane has been served (otherwise fair_lanes fills up during the run and the later, larger
    sizes pay for more rows)."""
    for agent in agents:
        await sql.put_agent(AgentConfig(agent, AGENT_R, "none", "", 1, now_ms()))
    async with store.transaction([]) as tx:
        await sql.save_fairness(tx, OWNER, 0, dict.fromkeys(agents, 0))


def observation() -> Observation:
    return Observation(
        owner_id=OWNER,
        runtime_instance_id=INSTANCE,
        routes=(Route(DEVICE, "local"),),
        limit=DEVICE_D,
        active=0,
        active_task_ids=(),
        queued=0,
        labels=(),
        observed_at_ms=None,
        received_at_ms=now_ms(),
    )


# -- measuring --------------------------------------------------------------------------------


@dataclass
class Measured:
    queued: int
    agents: int
    latencies_s: list[float]

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def mean_ms(self) -> float:
        return 1000 * statistics.fmean(self.latencies_s)


async def claim_and_release(app: Coordinator, cap: Capacity) -> float:
    t0 = time.perf_counter()
    outcome = await cap.claims.claim(OWNER, INSTANCE, DEVICE, 1, LEASE_TTL_MS, ACTOR)
    elapsed = time.perf_counter() - t0
    if len(outcome.claimed) != 1 or outcome.blocked is not Blocked.NONE:
        raise RuntimeError(f"claim got {len(outcome.claimed)}: {outcome.blocked} {outcome.detail}")
    got = outcome.claimed[0]
    assert got.attempt.lease_token is not None
    release = c.ReleaseBeforeFence(got.run.id, ACTOR, lease_token=got.attempt.lease_token)
    result = await app.transitions.execute(release)
    if result.outcome != "applied":
        raise RuntimeError(f"release of {got.run.id}: {result.outcome}")
    return elapsed


async def measure(
    app: Coordinator, cap: Capacity, obs: MemoryObservationStore, opts: Options
) -> list[float]:
    for _ in range(opts.warmup):
        await obs.put(observation(), OBSERVATION_TTL_MS)
        await claim_and_release(app, cap)
    latencies: list[float] = []
    while len(latencies) < opts.calls:
        await obs.put(observation(), OBSERVATION_TTL_MS)  # fresh for the whole batch
        for _ in range(min(opts.batch, opts.calls - len(latencies))):
            latencies.append(await claim_and_release(app, cap))
    return latencies


async def queued_count(pool: asyncpg.Pool) -> int:
    count: int = await pool.fetchval(
        "SELECT count(*) FROM runs r JOIN attempts a ON a.id = r.current_attempt_id"
        " WHERE r.owner_id = $1 AND r.status = 'queued' AND a.status = 'queued'",
        OWNER,
    )
    return count


async def explain(url: str, agents: int) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the lanes and heads statements with generic plans, as
    the store's sessions run them, on a connection of its own."""
    conn = await asyncpg.connect(url, server_settings={"plan_cache_mode": "force_generic_plan"})
    try:
        await conn.execute(f"PREPARE bench_lanes AS {_LANES}")
        await conn.execute(f"PREPARE bench_heads AS {_HEADS}")
        lanes = [r[0] for r in await conn.fetch(f"EXECUTE bench_lanes('{OWNER}')")]
        literal = "'{" + ",".join(lanes) + "}'"
        labels = ", '[]'" if "$5" in _HEADS else ""  # the reported labels, when it takes them
        out: list[str] = []
        for name, call in (
            ("lanes", f"EXECUTE bench_lanes('{OWNER}')"),
            ("heads", f"EXECUTE bench_heads('{OWNER}', '{INSTANCE}', 1, {literal}{labels})"),
        ):
            rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {call}")
            out.append(f"--- {name} ({len(lanes)} lanes of {agents} agents)")
            out += ["    " + r[0] for r in rows]
        return out
    finally:
        await conn.close()


# -- driver -----------------------------------------------------------------------------------


@dataclass
class Options:
    sizes: list[int]
    agents: int
    calls: int
    warmup: int
    batch: int
    explain: bool
    keep_db: bool


async def bench(opts: Options) -> list[Measured]:
    url = await create_pg_database()
    try:
        await upgrade(url)
        store = await open_store(url)
        assert isinstance(store, PostgresStore)
        try:
            return await _bench(store, url, opts)
        finally:
            await store.close()
    finally:
        if opts.keep_db:
            print(f"kept database {url}")
        else:
            await drop_pg_database(url)


async def _bench(store: PostgresStore, url: str, opts: Options) -> list[Measured]:
    app = coordinator(store)
    obs = MemoryObservationStore()
    cap = capacity(app, obs, OBSERVATION_TTL_MS)
    pool = store.pool
    agents = agent_ids(opts.agents)
    await configure_agents(store, PostgresCapacitySql(pool), agents)
    await check_seeding(app, pool)
    print("checked: seeded rows are what Transitions.create writes")
    base_ms = now_ms() - 10 * max(opts.sizes)  # every seeded run was queued in the past
    seeded = 0
    results: list[Measured] = []
    for size in opts.sizes:
        t0 = time.perf_counter()
        await seed(pool, seeded, size, agents, base_ms)
        _progress(
            f"seeded {size - seeded} runs in {time.perf_counter() - t0:.1f} s ({size} queued)"
        )
        seeded = size
        if await queued_count(pool) != size:
            raise RuntimeError(f"expected {size} queued runs")
        _progress(f"{size} queued: {opts.warmup} warm-up + {opts.calls} measured claims")
        latencies = await measure(app, cap, obs, opts)
        if await queued_count(pool) != size:
            raise RuntimeError(f"the queue did not keep its size {size}")
        print(f"checked: {size} queued before and after the claims")
        results.append(Measured(size, opts.agents, latencies))
        if opts.explain:
            print("\n".join(await explain(url, opts.agents)))
    return results


def _short(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def report(results: Sequence[Measured]) -> str:
    lines = [f"{'queued':>8} {'agents':>7} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}"]
    for m in results:
        lines.append(
            f"{m.queued:>8} {m.agents:>7} {m.percentile_ms(0.50):>8.2f}"
            f" {m.percentile_ms(0.99):>8.2f} {m.mean_ms:>8.2f}"
        )
    small, large = results[0], results[-1]
    if large is not small:
        p50 = large.percentile_ms(0.50) / small.percentile_ms(0.50)
        p99 = large.percentile_ms(0.99) / small.percentile_ms(0.99)
        grew = large.queued / small.queued
        lines.append(
            f"claim cost ratio {_short(large.queued)}/{_short(small.queued)}:"
            f" p50 {p50:.1f}x, p99 {p99:.1f}x (queue grew {grew:.0f}x)"
        )
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    if not sizes or sizes[0] <= 0:
        raise argparse.ArgumentTypeError("sizes are positive integers")
    return sizes


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.claim", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=[1000, 10000, 100000], help="queued runs (grown in order)"
    )
    parser.add_argument("--agents", type=int, default=1000, help="agents the runs are spread on")
    parser.add_argument("--calls", type=int, default=300, help="measured claims per size")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured claims per size first")
    parser.add_argument("--batch", type=int, default=50, help="claims per observation refresh")
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN ANALYZE lanes and heads at each size"
    )
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    ns = parser.parse_args(argv)
    if ns.agents < 1 or ns.calls < 1 or ns.batch < 1 or ns.warmup < 0:
        parser.error("--agents, --calls and --batch must be positive, --warmup not negative")
    if ns.sizes[0] < ns.agents:
        parser.error("every size needs at least one run per agent")
    return Options(
        sizes=ns.sizes,
        agents=ns.agents,
        calls=ns.calls,
        warmup=ns.warmup,
        batch=ns.batch,
        explain=ns.explain,
        keep_db=ns.keep_db,
    )


def main(argv: Sequence[str] | None = None, runner: Callable[..., Any] = uvloop.run) -> int:
    opts = parse_args(argv)
    results = runner(bench(opts))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
