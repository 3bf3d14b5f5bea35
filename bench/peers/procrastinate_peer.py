"""procrastinate's side of bench.lifecycle, run by the peer venv (bench/peers/env.py), never by
the project's venv:

    <peer python> -m bench.peers.procrastinate_peer install --url U
    <peer python> -m bench.peers.procrastinate_peer worker  --url U --expect N --warmup W
    <peer python> -m bench.peers.procrastinate_peer produce --url U --producers P

The job is a no-op async task. ``install`` applies procrastinate's schema (once, before the
first round); the worker runs
``App.run_worker_async(queues=[QUEUE])`` with its defaults (concurrency 1, LISTEN/NOTIFY,
polling every 5 s) over a ``PsycopgConnector``; the producers are ``defer_async`` calls, one
per job, P in flight over a pool of P connections. A job is done when its row says
``succeeded``. Lines on stdout: bench/peers/protocol.py.

procrastinate is imported by name at run time (the project's type check runs without it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import sys
import time
from typing import Any

from bench.peers.protocol import backend_pid, commands, connect, say, wait_done

QUEUE = "bench"
TASK = "noop"
DONE_SQL = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"


def app(url: str, **pool: int) -> tuple[Any, Any]:
    """(the App, its no-op task)."""
    procrastinate = importlib.import_module("procrastinate")
    application = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url, **pool))
    box: dict[str, Any] = {}

    async def noop() -> None:
        if (hook := box.get("hook")) is not None:
            hook()

    task = application.task(name=TASK, queue=QUEUE)(noop)
    task.box = box  # the worker counts through it
    return application, task


async def worker(url: str, expect: int, warmup: int) -> None:
    application, task = app(url)
    handled = 0
    all_handled = asyncio.Event()

    def hook() -> None:
        nonlocal handled
        handled += 1
        if handled == warmup:
            say("warm")
        if handled == expect:
            all_handled.set()

    task.box["hook"] = hook
    async with application.open_async():
        running = asyncio.create_task(application.run_worker_async(queues=[QUEUE]))
        poller = connect(url)
        say("ready", backend_pid(poller))
        if warmup <= 0:
            say("warm")
        await all_handled.wait()
        await asyncio.to_thread(wait_done, poller, DONE_SQL, expect)
        say("done", repr(time.time()), handled)
        poller.close()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


async def install(url: str) -> None:
    application, _ = app(url)
    async with application.open_async():
        await application.schema_manager.apply_schema_async()


async def produce(url: str, producers: int) -> None:
    application, task = app(url, min_size=producers, max_size=producers)
    async with application.open_async():
        say("ready")
        lines = commands()
        while (count := await asyncio.to_thread(next, lines, None)) is not None:
            left = count

            async def producer() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await task.defer_async()

            t0 = time.time()
            await asyncio.gather(*(producer() for _ in range(producers)))
            say("produced", repr(t0), repr(time.time()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.procrastinate_peer")
    parser.add_argument("mode", choices=["install", "worker", "produce"])
    parser.add_argument("--url", required=True, help="the database (postgresql://)")
    parser.add_argument("--expect", type=int, default=0, help="worker: jobs until done")
    parser.add_argument("--warmup", type=int, default=0, help="worker: jobs before 'warm'")
    parser.add_argument("--producers", type=int, default=1, help="produce: calls in flight")
    args = parser.parse_args(argv)
    if args.mode == "install":
        asyncio.run(install(args.url))
    elif args.mode == "worker":
        asyncio.run(worker(args.url, args.expect, args.warmup))
    else:
        asyncio.run(produce(args.url, args.producers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
