"""Transitions per second through ``Transitions`` on PostgreSQL, next to pgbench doing the same.

16 asyncio writers (one process, uvloop) each own a set of queued runs and flip them through
``Transitions.execute``: Claim (run queued -> dispatching, attempt queued -> claimed), then
ReleaseBeforeFence (both back to queued). One transition is the LOAD select plus one
data-modifying CTE, as the store runs them. pgbench then runs the same two statements, with
their SQL text taken from ``coordinator.store.postgres.sql`` and the ``$n`` parameters replaced by
pgbench variables, on its own runs, with 16 clients for the same number of seconds. The
ratio python/pgbench says how much of PostgreSQL's own rate the service keeps.

    .venv/bin/python -m bench.transition --seconds 20

See bench/README.md for what differs between the two workloads.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

from coordinator.domain import commands as c
from coordinator.domain.decide import Context, Decision, decide
from coordinator.domain.model import Actor, Attempt, Run
from coordinator.domain.states import ActorType, AttemptStatus, RunStatus
from coordinator.service.transitions import Transitions
from coordinator.store.postgres import PostgresStore
from coordinator.store.postgres.sql import LOAD, STATEMENTS
from coordinator.store.postgres.writer import parameters
from coordinator.store.rows import attempt_values, run_values
from kernel.db.migrate import upgrade
from tests.support.databases import create_pg_database, drop_pg_database

WRITERS = 16
PGBENCH_THREADS = 2
# Run and attempt ids are 19-digit decimal strings so that a pgbench client can compute the
# ids of its runs (pgbench has integer variables only). Both sides use the same id shape.
PYTHON_BASE = 1_000_000_000_000_000_000
PGBENCH_BASE = 1_100_000_000_000_000_000
EVENT_BASE = 2_000_000_000_000_000_000  # pgbench event ids; Python uses uuid7 (see README)
EVENT_BASE_STEP = 10**14  # per pgbench invocation, so ids never repeat across invocations

SCHEDULER = Actor(ActorType.SCHEDULER, "capacity")
INSTANCE = "runtime-instance-1"
DEVICE = "device-1"
SPEC = c.RunSpec(project_id="bench", owner_id="owner-1", task_id="task-1", created_by=SCHEDULER)

# The sample decisions that the pgbench statements are derived from use these, so that the
# values that vary per transaction can be recognised and turned into pgbench variables.
SAMPLE_NOW = 1_700_000_000_000
SAMPLE_TOKEN = "SAMPLE-LEASE-TOKEN"
NIL = "NULLIF(:nil, 'nil')"  # a NULL computed at run time (pgbench cannot bind a NULL)
PGOPTIONS = "-c plan_cache_mode=force_generic_plan"  # what PostgresStore sets per connection


def claim(run_id: str) -> c.Claim:
    return c.Claim(run_id, SCHEDULER, runtime_instance_id=INSTANCE, runtime_device_id=DEVICE)


def release(run_id: str) -> c.ReleaseBeforeFence:
    return c.ReleaseBeforeFence(run_id, SCHEDULER)


# -- seeding ----------------------------------------------------------------------------------


class DecimalIds:
    """new_id for seeding: consecutive decimal ids. ``decide`` takes the run id and then the
    attempt id without awaiting in between, so run j gets base + 2j, its attempt base + 2j + 1."""

    def __init__(self, base: int) -> None:
        self._next = base

    def __call__(self) -> str:
        value, self._next = self._next, self._next + 1
        return str(value)


async def seed(store: PostgresStore, base: int, count: int) -> list[str]:
    transitions = Transitions(store, new_id=DecimalIds(base))

    async def create(n: int) -> None:
        for _ in range(n):
            await transitions.create(SPEC)

    share, extra = divmod(count, WRITERS)
    await asyncio.gather(*(create(share + (i < extra)) for i in range(WRITERS)))
    run_ids = [str(base + 2 * j) for j in range(count)]
    queued = await _fetchval(
        store,
        "SELECT count(*) FROM runs r JOIN attempts a ON a.id = r.current_attempt_id"
        " WHERE r.id = ANY($1::text[]) AND r.status = 'queued' AND a.status = 'queued'"
        " AND r.version = 1",
        run_ids,
    )
    if queued != count:
        raise RuntimeError(f"seeding made {queued} of the {count} expected queued runs")
    return run_ids


async def _fetchval(store: PostgresStore, sql: str, *args: Any) -> Any:
    # The store's pool, for checks and maintenance outside the measured windows only.
    pool: asyncpg.Pool = store._pool
    return await pool.fetchval(sql, *args)


async def _execute(store: PostgresStore, sql: str) -> None:
    pool: asyncpg.Pool = store._pool
    await pool.execute(sql)


# -- the Python side --------------------------------------------------------------------------


@dataclass
class Writer:
    runs: list[str]
    claimed: list[bool] = field(default_factory=list)
    position: int = 0
    committed: int = 0

    def __post_init__(self) -> None:
        self.claimed = [False] * len(self.runs)

    async def drive(self, transitions: Transitions, start: float, end: float) -> list[float]:
        """Flip runs until ``end``; latencies of transitions completed in [start, end)."""
        latencies: list[float] = []
        n = len(self.runs)
        while True:
            k = self.position % n
            run_id = self.runs[k]
            command = release(run_id) if self.claimed[k] else claim(run_id)
            t0 = time.perf_counter()
            result = await transitions.execute(command)
            t1 = time.perf_counter()
            if result.outcome != "applied":
                raise RuntimeError(f"{type(command).__name__} on {run_id}: {result.outcome}")
            self.claimed[k] = not self.claimed[k]
            self.position += 1
            self.committed += 1
            if t1 >= end:
                return latencies
            if t1 >= start:
                latencies.append(t1 - t0)


@dataclass
class Measured:
    transitions: int
    seconds: float
    latencies_s: list[float]

    @property
    def rate(self) -> float:
        return self.transitions / self.seconds

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        if not ordered:
            return float("nan")
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def python_round(
    transitions: Transitions, writers: Sequence[Writer], warmup: int, seconds: int
) -> Measured:
    start = time.perf_counter() + warmup
    end = start + seconds
    per_writer = await asyncio.gather(*(w.drive(transitions, start, end) for w in writers))
    latencies = [x for lat in per_writer for x in lat]
    return Measured(len(latencies), float(seconds), latencies)


# -- the pgbench side -------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One real decision and the state it was decided on, to derive a pgbench statement."""

    kind: str
    decision: Decision
    run: Run
    attempt: Attempt


def samples(run: Run, attempt: Attempt) -> tuple[Sample, Sample]:
    def no_new_id() -> str:
        raise AssertionError("claim and release make no new ids")

    ctx = Context(now_ms=SAMPLE_NOW, new_id=no_new_id, new_token=lambda: SAMPLE_TOKEN)
    claimed = decide(claim(run.id), run, attempt, ctx)
    assert claimed.attempt is not None
    released = decide(release(run.id), claimed.run, claimed.attempt, ctx)
    return (
        Sample("claim", claimed, run, attempt),
        Sample("release", released, claimed.run, claimed.attempt),
    )


@dataclass
class PgbenchScript:
    text: str
    defines: dict[str, str]


def _array_literal(values: Sequence[Any]) -> str:
    def one(v: Any) -> str:
        if v is None:
            return "NULL"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "{" + ",".join(one(v) for v in values) + "}"


def _constant(value: Any) -> str:
    if isinstance(value, list | tuple):
        return _array_literal(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _one_line(sql: str) -> str:
    assert "'" not in sql and ";" not in sql and "\\" not in sql, "collapsing is safe"
    return " ".join(sql.split())


def _substitute(sql: str, exprs: Sequence[str]) -> str:
    return re.sub(r"\$(\d+)", lambda m: exprs[int(m.group(1)) - 1], sql)


def _statement(
    sample: Sample, defines: dict[str, str], sets: dict[str, str], ev_stride: int
) -> str:
    """The store's CTE for this decision, each $n replaced by what varies like it does."""
    decision = sample.decision
    sql, placeholders = STATEMENTS[(decision.run_write, decision.attempt_write)]
    values = parameters(decision, None)  # exactly what PostgresStore.apply binds
    names: list[str] = placeholders.bind({name: name for name in values})
    if any(n is None for n in names):
        raise AssertionError("a placeholder has no parameter value")
    run_row, attempt_row = run_values(sample.run), attempt_values(sample.attempt)

    def expr(name: str) -> str:
        value = values[name]
        if name == "run_id":
            return ":rid"
        if name == "expected_version":
            return ":l_version"
        if name == "r_version":
            assert value == sample.run.version + 1
            sets["next_version"] = ":l_version + 1"
            return ":next_version"
        if name == "a_key":
            assert value == sample.attempt.id
            return ":l_a_id"
        if name == "a_expected_status":
            assert value == attempt_row["status"]
            return ":l_a_status"
        if name == "a_expected_seq":
            assert value == sample.attempt.last_event_seq
            return ":l_a_last_event_seq"
        if name == "ev1":  # event ids (uuid7 in Python): distinct integers per transaction
            assert len(value) <= ev_stride
            return "ARRAY[" + ", ".join(f":ev_id{k}" for k in range(len(value))) + "]"
        if name == "ev5" and all(v == sample.attempt.id for v in value):
            return "ARRAY[" + ", ".join(":l_a_id" for _ in value) + "]"
        if value is None:
            return "NULL"
        if (
            isinstance(value, int)
            and (name.endswith("_ms") or name == "created")
            and SAMPLE_NOW <= value < SAMPLE_NOW + 10**9
        ):
            offset = value - SAMPLE_NOW
            if offset == 0:
                return ":now"
            sets[f"now_plus_{offset}"] = f":now + {offset}"
            return f":now_plus_{offset}"
        if value == SAMPLE_TOKEN:
            sets["lease_token"] = "random(1000000000000000000, 9000000000000000000)"
            return ":lease_token"
        column = name[2:]
        if name.startswith("r_") and column in run_row and run_row[column] == value:
            return f":l_{column}"  # carried over from the row the LOAD read
        if name.startswith("a_") and column in attempt_row and attempt_row[column] == value:
            return f":l_a_{column}"
        variable = f"{sample.kind}_{name}"
        defines[variable] = _constant(value)
        return f":{variable}"

    return _substitute(_one_line(sql), [expr(n) for n in names])


def pgbench_script(
    claim_sample: Sample, release_sample: Sample, runs_per_client: int
) -> PgbenchScript:
    if claim_sample.run.version % 2 != 1 or claim_sample.run.status is not RunStatus.QUEUED:
        raise AssertionError("seeded runs are queued at an odd version; claims keep that parity")
    assert claim_sample.attempt.status is AttemptStatus.QUEUED
    stride = max(len(claim_sample.decision.events), len(release_sample.decision.events))
    defines: dict[str, str] = {"nil": "nil", "i": "0"}
    claim_sets: dict[str, str] = {}
    release_sets: dict[str, str] = {}
    claim_sql = _statement(claim_sample, defines, claim_sets, stride)
    release_sql = _statement(release_sample, defines, release_sets, stride)
    # What Transitions.execute passes for a run command: store.load(run_id, None, None).
    load_sql = _substitute(_one_line(LOAD), [":rid", NIL, NIL])
    lines = [
        r"\set i :i + 1",
        rf"\set rid {PGBENCH_BASE} + 2 * (:client_id * {runs_per_client}"
        rf" + mod(:i, {runs_per_client}))",
        r"\set now :t0 + :i",
        *(
            rf"\set ev_id{k} :ev_base + (:i * {WRITERS} + :client_id) * {stride} + {k}"
            for k in range(stride)
        ),
        load_sql + r" \gset l_",
        # Claims and releases alternate per run, so an odd version means queued.
        r"\if mod(:l_version, 2) = 1",
        *(rf"\set {k} {v}" for k, v in claim_sets.items()),
        claim_sql + ";",
        r"\else",
        *(rf"\set {k} {v}" for k, v in release_sets.items()),
        release_sql + ";",
        r"\endif",
    ]
    return PgbenchScript("\n".join(lines) + "\n", defines)


@dataclass
class PgbenchRun:
    processed: int
    tps: float
    latencies_s: list[float]
    seconds: int

    def measured(self) -> Measured:
        return Measured(round(self.tps * self.seconds), float(self.seconds), self.latencies_s)


async def run_pgbench(
    binary: str,
    url: str,
    script: Path,
    defines: dict[str, str],
    seconds: int,
    log_dir: Path | None,
) -> PgbenchRun:
    args = [
        binary,
        "--no-vacuum",
        "--protocol=prepared",
        f"--client={WRITERS}",
        f"--jobs={PGBENCH_THREADS}",
        f"--time={seconds}",
        f"--file={script}",
    ]
    args += [f"--define={k}={v}" for k, v in defines.items()]
    if log_dir is not None:
        args += ["--log", f"--log-prefix={log_dir / 'pgbench'}"]
    args.append(url)
    env = dict(os.environ, PGOPTIONS=PGOPTIONS)
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out_b, err_b = await proc.communicate()
    out, err = out_b.decode(), err_b.decode()
    failed = re.search(r"number of failed transactions: (\d+)", out)
    if proc.returncode != 0 or "aborted" in err or failed is None or int(failed.group(1)):
        raise RuntimeError(f"pgbench failed (exit {proc.returncode}):\n{out}\n{err}")
    processed = re.search(r"number of transactions actually processed: (\d+)", out)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    assert processed is not None and tps is not None, out
    latencies: list[float] = []
    if log_dir is not None:
        for path in log_dir.glob("pgbench.*"):
            for line in path.read_text().splitlines():
                latencies.append(int(line.split()[2]) / 1e6)  # latency in microseconds
            path.unlink()
    return PgbenchRun(int(processed.group(1)), float(tps.group(1)), latencies, seconds)


# -- driver -----------------------------------------------------------------------------------


@dataclass
class Options:
    seconds: int
    warmup: int
    runs_per_writer: int
    rounds: int
    pgbench: str
    keep_db: bool
    show_script: bool


async def _verify(store: PostgresStore, run_ids: list[str], transitions: int, side: str) -> str:
    versions = await _fetchval(
        store, "SELECT coalesce(sum(version - 1), 0) FROM runs WHERE id = ANY($1::text[])", run_ids
    )
    events = await _fetchval(
        store, "SELECT count(*) FROM run_events WHERE run_id = ANY($1::text[])", run_ids
    )
    expected_events = 2 * len(run_ids) + 2 * transitions  # created + queued, then 2 per flip
    if versions != transitions or events != expected_events:
        return (
            f"{side}: MISMATCH: {transitions} transitions counted, versions moved {versions},"
            f" {events} events (expected {expected_events})"
        )
    return f"{side}: {transitions} transitions committed, checked against versions and events"


def _line(side: str, m: Measured) -> str:
    return (
        f"{side:<8} {m.rate:8.0f} transitions/s  ({m.transitions} in {m.seconds:.0f} s;"
        f" p50 {m.percentile_ms(0.50):.2f} ms, p99 {m.percentile_ms(0.99):.2f} ms)"
    )


async def bench(opts: Options) -> float:
    url = await create_pg_database()
    tmp = Path(tempfile.mkdtemp(prefix="truerun-bench-"))
    try:
        await upgrade(url)
        store = await PostgresStore.connect(url, min_size=WRITERS, max_size=WRITERS)
        try:
            return await _bench(store, url, tmp, opts)
        finally:
            await store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if opts.keep_db:
            print(f"kept database {url}")
        else:
            await drop_pg_database(url)


async def _bench(store: PostgresStore, url: str, tmp: Path, opts: Options) -> float:
    count = WRITERS * opts.runs_per_writer
    py_runs = await seed(store, PYTHON_BASE, count)
    pg_runs = await seed(store, PGBENCH_BASE, count)
    loaded = await store.load(pg_runs[0])
    assert loaded is not None and loaded.attempt is not None
    script = pgbench_script(*samples(loaded.run, loaded.attempt), opts.runs_per_writer)
    script_path = tmp / "transition.pgbench"
    script_path.write_text(script.text)
    if opts.show_script:
        print(script.text)
        for k, v in script.defines.items():
            print(f"-D {k}={v}")
        print()

    per = opts.runs_per_writer
    writers = [Writer(py_runs[w * per : (w + 1) * per]) for w in range(WRITERS)]
    transitions = Transitions(store)
    t0 = str(time.time_ns() // 1_000_000)
    invocations = 0
    pg_processed = 0

    async def pgbench(seconds: int, log: bool) -> PgbenchRun:
        nonlocal invocations, pg_processed
        defines = dict(
            script.defines, t0=t0, ev_base=str(EVENT_BASE + invocations * EVENT_BASE_STEP)
        )
        invocations += 1
        log_dir = tmp if log else None
        result = await run_pgbench(opts.pgbench, url, script_path, defines, seconds, log_dir)
        pg_processed += result.processed
        return result

    # autovacuum may be off (it is on the reference machine): give each side the same start.
    await _execute(store, "VACUUM (ANALYZE) runs, attempts, run_events")
    py_all: list[Measured] = []
    pg_all: list[Measured] = []
    for r in range(opts.rounds):
        order = ("python", "pgbench") if r % 2 == 0 else ("pgbench", "python")
        for side in order:
            await _execute(store, "VACUUM runs, attempts, run_events")
            _progress(f"round {r + 1}: {side}, {opts.warmup} s warm-up + {opts.seconds} s")
            if side == "python":
                m = await python_round(transitions, writers, opts.warmup, opts.seconds)
                py_all.append(m)
            else:
                if opts.warmup:
                    await pgbench(opts.warmup, log=False)
                m = (await pgbench(opts.seconds, log=True)).measured()
                pg_all.append(m)
            if opts.rounds > 1:
                print(f"round {r + 1}: {_line(side, m)}")

    py = _total(py_all)
    pg = _total(pg_all)
    print(await _verify(store, py_runs, sum(w.committed for w in writers), "python"))
    print(await _verify(store, pg_runs, pg_processed, "pgbench"))
    print(_line("python", py))
    print(_line("pgbench", pg))
    ratio = py.rate / pg.rate
    rounds = f" x {opts.rounds} rounds" if opts.rounds > 1 else ""
    print(
        f"ratio {ratio:.2f} (python {py.rate:.0f}/s, pgbench {pg.rate:.0f}/s,"
        f" {WRITERS} writers, {opts.seconds} s{rounds})"
    )
    return ratio


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _total(parts: list[Measured]) -> Measured:
    return Measured(
        sum(m.transitions for m in parts),
        sum(m.seconds for m in parts),
        [x for m in parts for x in m.latencies_s],
    )


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.transition", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=int, default=20, help="measured seconds per side")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured seconds before each")
    parser.add_argument("--runs-per-writer", type=int, default=200)
    parser.add_argument(
        "--rounds", type=int, default=1, help="python then pgbench, alternating order per round"
    )
    parser.add_argument("--pgbench", default="pgbench", help="the pgbench binary")
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    parser.add_argument("--show-script", action="store_true", help="print the pgbench script")
    ns = parser.parse_args(argv)
    return Options(
        seconds=ns.seconds,
        warmup=ns.warmup,
        runs_per_writer=ns.runs_per_writer,
        rounds=ns.rounds,
        pgbench=ns.pgbench,
        keep_db=ns.keep_db,
        show_script=ns.show_script,
    )


def main(argv: Sequence[str] | None = None, runner: Callable[..., Any] = uvloop.run) -> int:
    opts = parse_args(argv)
    runner(bench(opts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
