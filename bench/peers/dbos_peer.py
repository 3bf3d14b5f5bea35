"""DBOS's side of bench.lifecycle, run by the peer venv (bench/peers/env.py), never by the
project's venv:

    <peer python> -m bench.peers.dbos_peer worker  --url U --expect N --warmup W
    <peer python> -m bench.peers.dbos_peer produce --url U --producers P

The job is a no-op workflow with one no-op step (``@DBOS.workflow`` calling a
``@DBOS.step``), enqueued on a DBOS queue. The worker is a DBOS application
(``DBOS(config={"name", "system_database_url"})``, ``DBOS.launch()``) with that queue
registered with its defaults (no concurrency limit, polled every 1 s); the producers are
``DBOSClient.enqueue`` calls, one per workflow, from P threads sharing one client (pool of P
connections). A workflow is done when its status row says ``SUCCESS``. Lines on stdout:
bench/peers/protocol.py.

dbos is imported by name at run time (the project's type check runs without it).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.peers.protocol import backend_pid, commands, connect, say, wait_done

APP_NAME = "truerun-bench-lifecycle"
QUEUE = "bench"
WORKFLOW = "noop_workflow"
STEP = "noop_step"
DONE_SQL = "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"


def _dbos() -> Any:
    return importlib.import_module("dbos")


def worker(url: str, expect: int, warmup: int) -> None:
    dbos = _dbos().DBOS
    lock = threading.Lock()
    handled = 0
    all_handled = threading.Event()

    def noop_step() -> None:
        return None

    step = dbos.step(name=STEP)(noop_step)

    def noop_workflow() -> None:
        nonlocal handled
        step()
        with lock:
            handled += 1
            count = handled
        if count == warmup:
            say("warm")
        if count == expect:
            all_handled.set()

    dbos.workflow(name=WORKFLOW)(noop_workflow)
    dbos(config={"name": APP_NAME, "system_database_url": url, "log_level": "WARNING"})
    dbos.launch()
    dbos.register_queue(QUEUE)
    poller = connect(url)
    say("ready", backend_pid(poller))
    if warmup <= 0:
        say("warm")
    all_handled.wait()
    wait_done(poller, DONE_SQL, expect)
    say("done", repr(time.time()), handled)
    poller.close()
    dbos.destroy()


def produce(url: str, producers: int) -> None:
    module = _dbos()
    client = module.DBOSClient(system_database_url=url, system_database_pool_size=producers)
    options = {"queue_name": QUEUE, "workflow_name": WORKFLOW}
    say("ready")
    with ThreadPoolExecutor(producers) as pool:
        lock = threading.Lock()
        left = 0

        def producer() -> None:
            nonlocal left
            while True:
                with lock:
                    if left <= 0:
                        return
                    left -= 1
                client.enqueue(options)

        for count in commands():
            left = count
            t0 = time.time()
            for future in [pool.submit(producer) for _ in range(producers)]:
                future.result()
            say("produced", repr(t0), repr(time.time()))
    client.destroy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.dbos_peer")
    parser.add_argument("mode", choices=["worker", "produce"])
    parser.add_argument("--url", required=True, help="the system database (postgresql://)")
    parser.add_argument("--expect", type=int, default=0, help="worker: jobs until done")
    parser.add_argument("--warmup", type=int, default=0, help="worker: jobs before 'warm'")
    parser.add_argument("--producers", type=int, default=1, help="produce: calls in flight")
    args = parser.parse_args(argv)
    if args.mode == "worker":
        worker(args.url, args.expect, args.warmup)
    else:
        produce(args.url, args.producers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
