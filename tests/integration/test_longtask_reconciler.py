"""Two real `truerun reconciler` processes on one database (SQLite file and PostgreSQL) run
the long-task watcher (docs/long-tasks.md "The watcher and the scheduler"): queued tasks
start under TRUERUN_LONG_TASK_OWNER_CONCURRENCY, each attempt once; a run ended through the
coordinator ends its attempt once; SIGTERM ends both with exit code 0."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from coordinator.domain.states import RunStatus
from longtasks.domain.states import TaskState
from services.bootstrap import open_store
from tests.support.clock import Clock
from tests.support.longtask_watch import cancel_run, queued
from tests.support.longtasks import Harness, harness, read

DEADLINE_S = 60.0  # the machine may be loaded; every wait polls something observable
ROOT = Path(__file__).resolve().parents[2]


async def until(what: str, condition: Callable[[], Awaitable[bool]]) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while not await condition():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def reconciler(url: str, out: Path) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        TRUERUN_DATABASE_URL=url,
        TRUERUN_METRICS_ADDR="127.0.0.1:0",
        TRUERUN_GRPC_ADDR="127.0.0.1:0",
        TRUERUN_LONG_TASK_OWNER_CONCURRENCY="2",
    )
    with out.open("w") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "reconciler"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )


async def states(h: Harness) -> dict[str, TaskState]:
    rows = await read(h.store, "SELECT id, state FROM long_tasks")
    return {row["id"]: TaskState(row["state"]) for row in rows}


async def test_two_reconcilers_start_and_end_each_attempt_once(
    migrated_database_url: str, tmp_path: Path
) -> None:
    store = await open_store(migrated_database_url)
    h = harness(store, Clock())
    for n in range(1, 5):
        await queued(h, f"lt-{n}", max_attempts=1)
    outs = [tmp_path / f"reconciler-{n}.out" for n in (1, 2)]
    procs = [reconciler(migrated_database_url, out) for out in outs]
    try:

        async def ready() -> bool:
            return all(re.search(r"^reconciler running$", o.read_text(), re.M) for o in outs)

        await until("both reconcilers running", ready)

        async def two_running() -> bool:
            return Counter((await states(h)).values())[TaskState.RUNNING] == 2

        await until("two tasks running (the owner's cap)", two_running)
        assert (await states(h))["lt-1"] is TaskState.RUNNING  # creation order
        assert (await states(h))["lt-2"] is TaskState.RUNNING
        for _ in range(3):  # the cap holds while both replicas keep going
            await asyncio.sleep(0.5)
            assert Counter((await states(h)).values())[TaskState.QUEUED] == 2

        async def all_finished() -> bool:
            for row in await read(h.store, "SELECT run_id FROM long_task_attempts"):
                loaded = await h.store.load(row["run_id"])
                if loaded is not None and loaded.run.status is RunStatus.QUEUED:
                    await cancel_run(h, row["run_id"])  # a person cancels each attempt's run
            return all(s.terminal for s in (await states(h)).values())

        await until("every task finished", all_finished)
        # 1 attempt each, no step done: the budget's boundary with no useful result
        assert set((await states(h)).values()) == {TaskState.FAILED}
        for task_id in (await states(h)).keys():
            [attempt] = await h.sql.attempts(None, task_id)
            assert attempt.ended_at_ms is not None
            noted = Counter((e.type, e.attempt_id) for e in await h.sql.events(task_id))
            assert noted[("attempt_started", attempt.id)] == 1
            assert noted[("attempt_ended", attempt.id)] == 1
            assert attempt.reason.startswith("its run ended cancelled")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=DEADLINE_S) for proc in procs]
        await store.close()
    assert codes == [0, 0], [o.read_text() for o in outs]
