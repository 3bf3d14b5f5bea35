"""Runs per second through the whole lifecycle, next to pgqueuer's default worker.

truerun: the product's ``truerun dev`` in a process of its own on a fresh PostgreSQL
database; this process creates ``--runs`` runs with ``RunService.CreateRun`` (``--producers``
calls in flight) while a no-op runtime speaking the real protocol over loopback (Hello,
heartbeats with D = ``--limit``) answers every Start at once: an accepted StartResult, then
``ACCEPTED`` (seq 1), ``RUNNING`` (seq 2) and ``SUCCEEDED`` (seq 3, exit code 0). A run is
done when the Ack covering its seq 3 arrives. So every run goes create -> claim -> start
fence -> Start -> accepted -> running -> succeeded, all committed.

pgqueuer: its schema installed in the same database; ``PgQueuer(AsyncpgDriver(conn))`` with
one no-op entrypoint and ``run()`` with its defaults (batch size 10, LISTEN/NOTIFY) in a
process of its own; this process enqueues the same number of jobs one ``enqueue`` call each
with as many producers. A job is done when the worker's ``run()`` returned after the last
handler (its completion log is flushed).

Both: a warm-up batch first, then the clock runs from the first create/enqueue to the last
done. Rate = jobs / elapsed. The ratio is truerun / pgqueuer.

    .venv/bin/python -m bench.lifecycle --runs 3000

See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import uvloop
from google.protobuf import struct_pb2

# pgqueuer is a benchmark-only dependency (bench/requirements.txt); it ships types, and
# without it mypy sees Any (the ignores keep `make typecheck` green where it is missing).
from pgqueuer import PgQueuer  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.models import Job  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.queries import Queries  # type: ignore[import-not-found, unused-ignore]
from truerun.v1 import run_service_pb2, run_service_pb2_grpc
from truerun.v1 import runtime_service_pb2 as pb

from bench.ingest import (
    HEARTBEAT_S,
    OWNER,
    PROJECT,
    CpuMeter,
    Profiler,
    RuntimeStream,
    Started,
    api_channel,
    code_version,
    cores,
    server_env,
)
from bench.server import ServerProcess, start_server, stop_server
from bench.transition import _progress
from kernel.db.migrate import upgrade
from tests.support.databases import create_pg_database, drop_pg_database

ENTRYPOINT = "noop"
SPEC = {"command": "true"}  # what each run / job carries
JOB_PAYLOAD = b'{"command": "true"}'
TERMINAL_SEQ = 3


# -- truerun: producer and no-op runtime ------------------------------------------------------


class NoopRuntimes:
    """Runtimes that finish every Start at once; counts runs whose SUCCEEDED was acked."""

    def __init__(self) -> None:
        self.done = 0
        self.target = 0
        self.last_done = 0.0  # time.time() of the last completion
        self.finished = asyncio.Event()

    def on_start(self, stream: RuntimeStream, start: pb.Start) -> None:
        started = Started(
            start.run_id, start.attempt_id, start.runtime_task_id, start.callback_token
        )
        stream.started[start.attempt_id] = started
        result = pb.StartResult(
            attempt_id=start.attempt_id,
            runtime_task_id=start.runtime_task_id,
            accepted=True,
            seq=1,
        )
        stream.send(pb.ConnectRequest(start_result=result))
        stream.event(started, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        stream.event(started, pb.RUNTIME_EVENT_TYPE_RUNNING, turn_status=pb.TURN_STATUS_ACTIVE)
        stream.event(started, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)

    def on_ack(self, stream: RuntimeStream, ack: pb.Ack, now: float) -> None:
        if ack.seq >= TERMINAL_SEQ and stream.started.pop(ack.attempt_id, None) is not None:
            self.done += 1
            if self.done >= self.target:
                self.last_done = time.time()
                self.finished.set()


async def create_runs(address: str, count: int, producers: int) -> float:
    """``count`` CreateRun calls, ``producers`` in flight; returns time.time() when done."""
    spec = struct_pb2.Struct()
    spec.update(SPEC)
    async with api_channel(address) as channel:
        stub = run_service_pb2_grpc.RunServiceStub(channel)
        left = count

        async def producer() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                request = run_service_pb2.CreateRunRequest(
                    project_id=PROJECT, owner_id=OWNER, task_id="noop", spec=spec
                )
                response = await stub.CreateRun(request, timeout=60)
                assert response.run.id

        await asyncio.gather(*(producer() for _ in range(producers)))
    return time.time()


@dataclass
class Measured:
    side: str
    jobs: int
    seconds: float
    produced_s: float  # until the last create/enqueue returned
    used: dict[str, float]

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    def line(self) -> str:
        return (
            f"{self.side:<9} {self.rate:7.0f} runs/s ({self.jobs} in {self.seconds:.2f} s;"
            f" creates done after {self.produced_s:.2f} s); cores: {cores(self.used)}"
        )


async def truerun_round(
    server: ServerProcess, runtimes: NoopRuntimes, runs: int, producers: int, meter: CpuMeter
) -> Measured:
    runtimes.target = runtimes.done + runs
    runtimes.finished.clear()
    if runs <= 0:  # --warmup 0: nothing to wait for
        return Measured("truerun", 0, 0.0, 0.0, {})
    meter.begin()
    t0 = time.time()
    produced = await create_runs(server.address, runs, producers)
    await asyncio.wait_for(runtimes.finished.wait(), 600)
    used = meter.end()
    return Measured("truerun", runs, runtimes.last_done - t0, produced - t0, used)


# -- pgqueuer: worker process and producer -----------------------------------------------------


async def pgqueuer_worker(dsn: str, expect: int, warmup: int) -> None:
    """The default worker: PgQueuer over one asyncpg connection, run() with its defaults.
    Prints 'warm' after ``warmup`` jobs and 'flushed <time>' once run() returned after
    ``expect`` jobs."""
    connection = await asyncpg.connect(dsn)
    pgq = PgQueuer(AsyncpgDriver(connection))
    handled = 0
    if warmup <= 0:
        print("warm", flush=True)

    async def noop(job: Job) -> None:
        nonlocal handled
        handled += 1
        if handled == warmup:
            print("warm", flush=True)
        if handled == expect:
            pgq.shutdown.set()

    pgq.entrypoint(ENTRYPOINT)(noop)

    await pgq.run()
    print(f"flushed {time.time()!r} {handled}", flush=True)
    await connection.close()


async def enqueue(url: str, count: int, producers: int) -> float:
    connections = [await asyncpg.connect(url) for _ in range(producers)]
    try:
        left = count

        async def producer(connection: asyncpg.Connection) -> None:
            nonlocal left
            queries = Queries(AsyncpgDriver(connection))
            while left > 0:
                left -= 1
                await queries.enqueue(ENTRYPOINT, JOB_PAYLOAD)

        await asyncio.gather(*(producer(c) for c in connections))
        return time.time()
    finally:
        for connection in connections:
            await connection.close()


async def pgqueuer_round(
    url: str, runs: int, warmup: int, producers: int, meter: CpuMeter
) -> Measured:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.lifecycle",
        "--pgqueuer-worker",
        url,
        "--runs",
        str(runs),
        "--warmup",
        str(warmup),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        await asyncio.sleep(1.0)  # let it connect and LISTEN; the warm-up proves it works
        await enqueue(url, warmup, producers)
        await asyncio.wait_for(_worker_line(proc.stdout, b"warm"), 60)
        meter.pids["worker"] = proc.pid
        meter.begin()
        t0 = time.time()
        produced = await enqueue(url, runs, producers)
        line = await asyncio.wait_for(_worker_line(proc.stdout, b"flushed"), 600)
        used = meter.end()
        del meter.pids["worker"]
        fields = line.split()
        if len(fields) != 3 or fields[0] != b"flushed" or int(fields[2]) != warmup + runs:
            raise RuntimeError(f"pgqueuer worker: {line!r}")
        await proc.wait()
        return Measured("pgqueuer", runs, float(fields[1]) - t0, produced - t0, used)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _worker_line(stdout: asyncio.StreamReader, word: bytes) -> bytes:
    """The worker's next line starting with ``word``, whatever else it prints before it."""
    seen: list[bytes] = []
    while line := await stdout.readline():
        if line.split(maxsplit=1)[:1] == [word]:
            return line
        seen.append(line)
    raise RuntimeError(f"pgqueuer worker ended before {word!r}: {seen!r}")


# -- driver -----------------------------------------------------------------------------------


@dataclass
class Options:
    runs: int
    warmup: int
    producers: int
    limit: int
    runtimes: int
    rounds: int
    heartbeat_s: float
    keep_db: bool
    seconds: float
    profile: str


async def bench(opts: Options) -> float:
    url = await create_pg_database()
    tmp = Path(tempfile.mkdtemp(prefix="truerun-bench-lifecycle-"))
    server: ServerProcess | None = None
    try:
        await upgrade(url)
        connection = await asyncpg.connect(url)
        try:
            await Queries(AsyncpgDriver(connection)).install()
        finally:
            await connection.close()
        server = await start_server(url, tmp, server_env())
        try:
            return await _bench(server, url, opts)
        except BaseException:
            tail = server.log_path.read_text().splitlines()[-40:]
            print("server log (last lines):", *tail, sep="\n", file=sys.stderr)
            raise
    finally:
        if server is not None:
            await stop_server(server)
        shutil.rmtree(tmp, ignore_errors=True)
        if opts.keep_db:
            print(f"kept database {url}")
        else:
            await drop_pg_database(url)


async def _bench(server: ServerProcess, url: str, opts: Options) -> float:
    size = f"about {opts.seconds:g} s of runs" if opts.seconds > 0 else f"{opts.runs} runs"
    print(
        f"code {code_version()}; {size} per side, {opts.producers} producers,"
        f" {opts.runtimes} runtime(s) with D = {opts.limit}, heartbeat every {opts.heartbeat_s:g} s"
    )
    runtimes = NoopRuntimes()
    streams = [
        RuntimeStream(server.address, f"noop-runtime-{i}", opts.limit, heartbeat_s=opts.heartbeat_s)
        for i in range(opts.runtimes)
    ]
    for stream in streams:
        stream.on_start = runtimes.on_start
        stream.on_ack = runtimes.on_ack
    await asyncio.gather(*(s.open() for s in streams))
    meter = CpuMeter({"server": server.pid, "load": os.getpid()})
    watch = asyncio.create_task(_watch(streams))
    results: dict[str, list[Measured]] = {"truerun": [], "pgqueuer": []}
    try:
        _progress(f"truerun warm-up: {opts.warmup} runs")
        warm = await truerun_round(server, runtimes, opts.warmup, opts.producers, CpuMeter({}))
        if opts.seconds > 0:  # size the rounds: about --seconds of truerun at the warm-up rate
            opts.runs = max(100, round(warm.rate * opts.seconds / 100) * 100)
            print(f"--seconds {opts.seconds:g}: {opts.runs} runs per side")
        for r in range(opts.rounds):
            order = ("truerun", "pgqueuer") if r % 2 == 0 else ("pgqueuer", "truerun")
            for side in order:
                _progress(f"round {r + 1}: {side}, {opts.runs} runs")
                if side == "truerun":
                    profiler = None
                    if opts.profile and r == 0:
                        profiler = Profiler(server.pid, opts.profile)
                        await profiler.start()
                    m = await truerun_round(server, runtimes, opts.runs, opts.producers, meter)
                    if profiler is not None:
                        await profiler.stop()
                else:
                    m = await pgqueuer_round(url, opts.runs, opts.warmup, opts.producers, meter)
                results[side].append(m)
                print(f"round {r + 1}: {m.line()}")
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in streams))
    print(await _verify(url, opts.warmup + opts.rounds * opts.runs))
    rates = {side: _rate(ms) for side, ms in results.items()}
    ratio = rates["truerun"] / rates["pgqueuer"]
    rounds = f" x {opts.rounds} rounds" if opts.rounds > 1 else ""
    print(
        f"ratio {ratio:.2f} (truerun {rates['truerun']:.0f} runs/s, pgqueuer"
        f" {rates['pgqueuer']:.0f} jobs/s, {opts.runs} each{rounds}; {os.cpu_count()} cores"
        " shared by server, worker, load and PostgreSQL)"
    )
    return ratio


async def _watch(streams: Sequence[RuntimeStream]) -> None:
    """Fail fast when a runtime stream dies (the round would wait for it forever)."""
    while True:
        await asyncio.sleep(0.5)
        for stream in streams:
            stream.check()


def _rate(parts: list[Measured]) -> float:
    return sum(m.jobs for m in parts) / sum(m.seconds for m in parts)


async def _verify(url: str, expected: int) -> str:
    connection = await asyncpg.connect(url)
    try:
        succeeded = await connection.fetchval(
            "SELECT count(*) FROM runs WHERE owner_id = $1 AND status = 'succeeded'", OWNER
        )
        other = await connection.fetchval(
            "SELECT count(*) FROM runs WHERE owner_id = $1 AND status <> 'succeeded'", OWNER
        )
        left = await connection.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        await connection.close()
    if succeeded != expected or other or left:
        return (
            f"MISMATCH: {succeeded} runs succeeded of {expected}, {other} in another state;"
            f" {left} pgqueuer jobs left"
        )
    return f"checked: {succeeded} runs succeeded, none in another state; pgqueuer table empty"


def parse_args(argv: Sequence[str] | None = None) -> tuple[Options, str]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lifecycle", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=5000, help="runs (and jobs) per round")
    parser.add_argument("--warmup", type=int, default=200, help="runs/jobs before the clock")
    parser.add_argument("--producers", type=int, default=8, help="creates/enqueues in flight")
    parser.add_argument("--limit", type=int, default=256, help="the runtime's D")
    parser.add_argument("--runtimes", type=int, default=1, help="no-op runtime instances")
    parser.add_argument("--rounds", type=int, default=1, help="alternating order per round")
    parser.add_argument(
        "--heartbeat-s", type=float, default=HEARTBEAT_S, help="runtime heartbeat interval"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        help="instead of --runs: about this many seconds per side (sized by the warm-up rate)",
    )
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    parser.add_argument(
        "--profile", default="", help="py-spy raw profile of the server in the first truerun round"
    )
    parser.add_argument("--pgqueuer-worker", default="", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.runs < 1 or ns.warmup < 0 or (ns.seconds > 0 and ns.warmup < 1):
        parser.error("--runs must be positive, --warmup not negative (positive with --seconds)")
    opts = Options(
        runs=ns.runs,
        warmup=ns.warmup,
        producers=ns.producers,
        limit=ns.limit,
        runtimes=ns.runtimes,
        rounds=ns.rounds,
        heartbeat_s=ns.heartbeat_s,
        keep_db=ns.keep_db,
        seconds=ns.seconds,
        profile=ns.profile,
    )
    return opts, ns.pgqueuer_worker


def main(argv: Sequence[str] | None = None, runner: Callable[..., Any] = uvloop.run) -> int:
    opts, worker_dsn = parse_args(argv)
    if worker_dsn:
        runner(pgqueuer_worker(worker_dsn, opts.warmup + opts.runs, opts.warmup))
    else:
        runner(bench(opts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
