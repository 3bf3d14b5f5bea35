"""pgqueuer's side of bench.lifecycle (pgqueuer is in the project's dev extra): its schema
(``Queries.install``) in a database of its own; its default worker
(``PgQueuer(AsyncpgDriver(conn))``, one no-op entrypoint, ``run()`` with its defaults: batch
10, LISTEN/NOTIFY) in a process of its own (``python -m bench.peers.pgqueuer_side URL ...``);
the producers in the harness, one asyncpg connection and one ``Queries.enqueue`` call per job
each. A job is done when the worker's ``run()`` returned after the last handler (its
completion log flushed)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence

import asyncpg
import uvloop

# pgqueuer ships types; without it mypy sees Any (the ignores keep `make typecheck` green).
from pgqueuer import PgQueuer  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.models import Job  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.queries import Queries  # type: ignore[import-not-found, unused-ignore]

from bench.ingest import CpuMeter
from bench.peers.base import Measured, Window, worker_line

ENTRYPOINT = "noop"
JOB_PAYLOAD = b'{"command": "true"}'


class Pgqueuer:
    name = "pgqueuer"
    unit = "jobs"

    async def prepare(self, url: str) -> None:
        connection = await asyncpg.connect(url)
        try:
            await Queries(AsyncpgDriver(connection)).install()
        finally:
            await connection.close()

    async def round(
        self, url: str, runs: int, warmup: int, producers: int, meter: CpuMeter, window: Window
    ) -> Measured:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.peers.pgqueuer_side",
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
            await asyncio.wait_for(worker_line(proc.stdout, b"warm", "pgqueuer worker"), 60)
            await window.begin()
            meter.pids["worker"] = proc.pid
            meter.begin()
            t0 = time.time()
            produced = await enqueue(url, runs, producers)
            flushed = worker_line(proc.stdout, b"flushed", "pgqueuer worker")
            fields = await asyncio.wait_for(flushed, 600)
            used = meter.end()
            del meter.pids["worker"]
            if len(fields) != 3 or int(fields[2]) != warmup + runs:
                raise RuntimeError(f"pgqueuer worker: {fields!r}")
            await proc.wait()
            await window.end()
            return Measured(self.name, runs, float(fields[1]) - t0, produced - t0, used)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    async def verify(self, url: str, expected: int) -> str:
        connection = await asyncpg.connect(url)
        try:
            left = await connection.fetchval("SELECT count(*) FROM pgqueuer")
        finally:
            await connection.close()
        if left:
            return f"MISMATCH: pgqueuer: {left} jobs left of {expected}"
        return f"checked: pgqueuer: {expected} jobs done, table empty"


async def enqueue(url: str, count: int, producers: int) -> float:
    """``count`` jobs, one ``enqueue`` call each, over ``producers`` connections; returns
    time.time() when the last returned."""
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


async def worker(dsn: str, expect: int, warmup: int) -> None:
    """The default worker. Prints 'warm' after ``warmup`` jobs and 'flushed <time> <n>' once
    run() returned after ``expect`` jobs."""
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.pgqueuer_side")
    parser.add_argument("url")
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    args = parser.parse_args(argv)
    uvloop.run(worker(args.url, args.warmup + args.runs, args.warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
