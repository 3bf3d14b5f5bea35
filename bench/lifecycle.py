"""Runs per second through the whole lifecycle, next to pgqueuer, DBOS and procrastinate.

truerun: the product's ``truerun dev`` in a process of its own on a fresh PostgreSQL
database; this process creates ``--runs`` runs, ``--producers`` in flight, each producer
sending one request a run and waiting for its answer before the next
(bench/lifecycle_truerun.py), while a no-op runtime speaking the real protocol over loopback (Hello,
heartbeats with D = ``--limit``) answers every Start at once: an accepted StartResult, then
``ACCEPTED`` (seq 1), ``RUNNING`` (seq 2) and ``SUCCEEDED`` (seq 3, exit code 0). A run is
done when the Ack covering its seq 3 arrives. So every run goes create -> claim -> start
fence -> Start -> accepted -> running -> succeeded, all committed.

Two truerun sides by how the producers create (``--create-api``, both by default): side
``truerun`` sends each run as one message on the producer's own ``CreateRunStream`` (a
long-lived stream, as each pgqueuer producer holds its own connection), side
``truerun-unary`` makes one ``CreateRun`` call a run.

The peers (``--peers``, bench/peers/): each in a database of its own on the same server,
its worker in a process of its own, the same number of producers making one job per call:
pgqueuer's default worker (bench/peers/pgqueuer_side.py), a DBOS no-op workflow with one
step on a DBOS queue and procrastinate's default worker (bench/peers/venv_side.py; both in
bench's own venv, bench/peers/env.py).

Every side: a warm-up batch first, then the clock runs from the first create/enqueue to the
last done. Rate = jobs / elapsed; rounds alternate the order (A B C, C B A, ...). The ratios
are each truerun side / each peer. ``--count-statements`` counts, instead of timing, what a
run costs PostgreSQL on every side (bench/statements.py).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from bench.ingest import (
    HEARTBEAT_S,
    CpuMeter,
    Profiler,
    RuntimeStream,
    code_version,
    server_env,
)
from bench.lifecycle_truerun import CREATE_SIDES, NoopRuntimes, truerun_round
from bench.lifecycle_verify import verify
from bench.peers.base import Measured, NoWindow, Peer, Window, ratios
from bench.peers.env import env_dir, peers_python
from bench.peers.pgqueuer_side import Pgqueuer
from bench.peers.venv_side import dbos, procrastinate
from bench.server import ServerProcess, start_server, stop_server
from bench.statements import SETTLE_S, Counting, enable, report
from bench.transition import _progress
from bench.vacuum import Vacuumed, announce
from bench.venv import installed_version
from kernel.db.migrate import upgrade
from tests.support.databases import create_pg_database, drop_pg_database

PEERS = ("pgqueuer", "dbos", "procrastinate")


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
    peers: tuple[str, ...]
    count_statements: bool
    settle_s: float
    top: int
    store: str
    vacuum: bool
    create_apis: tuple[str, ...] = ("stream",)


def make_peers(names: Sequence[str]) -> list[Peer]:
    """The peers named, in that order; the peers' venv is made only when one needs it."""
    in_venv = [n for n in names if n != "pgqueuer"]
    python = peers_python() if in_venv else Path(sys.executable)
    if in_venv:
        versions = ", ".join(f"{n} {installed_version(python, n)}" for n in in_venv)
        print(f"peers' venv: {env_dir()} ({versions})")
    made: dict[str, Callable[[], Peer]] = {
        "pgqueuer": Pgqueuer,
        "dbos": lambda: dbos(python),
        "procrastinate": lambda: procrastinate(python),
    }
    return [made[name]() for name in names]


async def bench(opts: Options) -> float:
    peers = make_peers(opts.peers)
    tmp = Path(tempfile.mkdtemp(prefix="truerun-bench-lifecycle-"))
    embedded = opts.store == "sqlite"  # truerun dev's own default: a file in its data dir
    urls = {"truerun": f"sqlite:///{tmp}/truerun.db" if embedded else await create_pg_database()}
    server: ServerProcess | None = None
    try:
        for peer in peers:
            urls[peer.name] = await create_pg_database()
        if opts.count_statements:  # before anything connects: only new sessions log
            for url in urls.values():
                await enable(url)
        await upgrade(urls["truerun"])
        for peer in peers:
            await peer.prepare(urls[peer.name])
        server = await start_server(urls["truerun"], tmp, server_env())
        try:
            return await _bench(server, urls, peers, opts)
        except BaseException:
            tail = server.log_path.read_text().splitlines()[-40:]
            print("server log (last lines):", *tail, sep="\n", file=sys.stderr)
            raise
    finally:
        if server is not None:
            await stop_server(server)
        if not (embedded and opts.keep_db):
            shutil.rmtree(tmp, ignore_errors=True)
        for url in urls.values():
            if opts.keep_db:
                print(f"kept database {url}")
            elif not url.startswith("sqlite:"):
                await drop_pg_database(url)


async def _bench(
    server: ServerProcess, urls: dict[str, str], peers: list[Peer], opts: Options
) -> float:
    size = f"about {opts.seconds:g} s of runs" if opts.seconds > 0 else f"{opts.runs} runs"
    print(
        f"code {code_version()}; {size} per side, {opts.producers} producers,"
        f" {opts.runtimes} runtime(s) with D = {opts.limit},"
        f" heartbeat every {opts.heartbeat_s:g} s; truerun on {opts.store};"
        f" peers: {', '.join(opts.peers) or 'none'}"
    )
    if opts.vacuum:
        await announce(urls.values())
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
    counting = Counting(opts.settle_s) if opts.count_statements else None
    apis = {CREATE_SIDES[api]: api for api in opts.create_apis}
    sides = [*apis, *(p.name for p in peers)]
    by_name = {p.name: p for p in peers}
    results: dict[str, list[Measured]] = {side: [] for side in sides}
    try:
        _progress(f"truerun warm-up: {opts.warmup} runs")
        warm = await truerun_round(
            server, runtimes, opts.warmup, opts.producers, CpuMeter({}), api=opts.create_apis[0]
        )
        if opts.seconds > 0:  # size the rounds: about --seconds of truerun at the warm-up rate
            opts.runs = max(100, round(warm.rate * opts.seconds / 100) * 100)
            print(f"--seconds {opts.seconds:g}: {opts.runs} runs per side")
        for r in range(opts.rounds):
            for side in sides if r % 2 == 0 else sides[::-1]:
                _progress(f"round {r + 1}: {side}, {opts.runs} runs")
                window: Window = NoWindow()
                url = urls["truerun" if side in apis else side]
                if counting is not None:
                    window = counting.window(side, url, opts.runs)
                if opts.vacuum:
                    window = Vacuumed(window, url)
                if side in apis:
                    profiler = None
                    if opts.profile and r == 0:
                        profiler = Profiler(server.pid, opts.profile)
                        await profiler.start()
                    m = await truerun_round(
                        server, runtimes, opts.runs, opts.producers, meter, window, apis[side]
                    )
                    if profiler is not None:
                        await profiler.stop()
                else:
                    peer = by_name[side]
                    m = await peer.round(
                        urls[side], opts.runs, opts.warmup, opts.producers, meter, window
                    )
                results[side].append(m)
                print(f"round {r + 1}: {m.line()}")
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in streams))
    expected = opts.rounds * opts.runs * len(apis)
    print(await verify(urls["truerun"], opts.warmup + expected))
    for peer in peers:
        print(await peer.verify(urls[peer.name], opts.rounds * (opts.warmup + opts.runs)))
    if counting is not None:
        print(report(counting.counts, opts.top))
        return 0.0
    return ratios(results, list(apis), peers, opts.runs, opts.rounds)


async def _watch(streams: Sequence[RuntimeStream]) -> None:
    """Fail fast when a runtime stream dies (the round would wait for it forever)."""
    while True:
        await asyncio.sleep(0.5)
        for stream in streams:
            stream.check()


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lifecycle", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=5000, help="runs (and jobs) per round")
    parser.add_argument("--warmup", type=int, default=1000, help="runs/jobs before the clock")
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
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help=f"comma-separated, of {', '.join(PEERS)} ('' for none; default all)",
    )
    parser.add_argument(
        "--count-statements",
        action="store_true",
        help="count statements, commits, rows and index entries per run on every side (not timed)",
    )
    parser.add_argument(
        "--settle-s",
        type=float,
        default=SETTLE_S,
        help="--count-statements: wait before and after each window (PostgreSQL's stats flush)",
    )
    parser.add_argument("--top", type=int, default=15, help="--count-statements: shapes shown")
    parser.add_argument(
        "--store",
        choices=("postgres", "sqlite"),
        default="postgres",
        help="truerun's database: PostgreSQL or the embedded SQLite (peers stay on PostgreSQL)",
    )
    parser.add_argument(
        "--create-api",
        choices=("both", *CREATE_SIDES),
        default="both",
        help="how truerun's producers create: one message a run on a CreateRunStream each"
        " (side 'truerun'), one CreateRun call a run ('truerun-unary'), or both as sides",
    )
    parser.add_argument("--keep-db", action="store_true", help="do not drop the databases")
    parser.add_argument(
        "--no-vacuum",
        dest="vacuum",
        action="store_false",
        help="do not VACUUM each side's database after its warm-up (bench/vacuum.py)",
    )
    parser.add_argument(
        "--profile", default="", help="py-spy raw profile of the server in the first truerun round"
    )
    ns = parser.parse_args(argv)
    peers = tuple(p for p in ns.peers.split(",") if p)
    if unknown := sorted(set(peers) - set(PEERS)):
        parser.error(f"--peers: unknown {', '.join(unknown)} (known: {', '.join(PEERS)})")
    if ns.runs < 1 or ns.warmup < 0 or (ns.seconds > 0 and ns.warmup < 1):
        parser.error("--runs must be positive, --warmup not negative (positive with --seconds)")
    if ns.store == "sqlite" and ns.count_statements:
        parser.error("--count-statements reads PostgreSQL's statement log: not with --store sqlite")
    if ns.settle_s < 0 or ns.top < 0:
        parser.error("--settle-s and --top must not be negative")
    return Options(
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
        peers=peers,
        count_statements=ns.count_statements,
        settle_s=ns.settle_s,
        top=ns.top,
        store=ns.store,
        vacuum=ns.vacuum,
        create_apis=tuple(CREATE_SIDES) if ns.create_api == "both" else (ns.create_api,),
    )


def main(argv: Sequence[str] | None = None, runner: Callable[..., Any] = uvloop.run) -> int:
    runner(bench(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
