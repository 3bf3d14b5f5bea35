"""Seed B §21.11: SQLite busy retries are bounded and never duplicate an event."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from coordinator.domain import commands as c
from coordinator.service.transitions import Transitions
from coordinator.store.sqlite import SqliteStore
from kernel.db.migrate import upgrade
from kernel.errors import StoreBusy
from tests.support.factories import SCHEDULER, spec


async def test_busy_database_fails_bounded_and_writes_nothing(sqlite_url: str) -> None:
    await upgrade(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    store = await SqliteStore.open(path, busy_timeout_ms=50, busy_retries=3)
    try:
        transitions = Transitions(store)
        run = (await transitions.create(spec())).run
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        started = time.monotonic()
        with pytest.raises(StoreBusy):
            await transitions.execute(c.Claim(run.id, SCHEDULER, runtime_instance_id="i"))
        elapsed = time.monotonic() - started
        blocker.execute("ROLLBACK")
        blocker.close()
        # 3 tries x 50 ms busy timeout plus short backoffs: bounded, well under a second.
        assert elapsed < 1.5
        events = await store.list_events(run.id, 0, 100)
        assert [e.type for e in events] == ["run.created", "run.queued"]
        # Once the lock is gone the same command applies exactly once.
        claimed = await transitions.execute(c.Claim(run.id, SCHEDULER, runtime_instance_id="i"))
        events = await store.list_events(run.id, 0, 100)
        assert [e.sequence for e in events] == [1, 2, 3, 4]
        assert claimed.run.version == run.version + 1
    finally:
        await store.close()


async def test_two_stores_on_one_file_serialize_writes(sqlite_url: str) -> None:
    """Two processes' worth of writers on one file: every transition lands once."""
    await upgrade(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    first = await SqliteStore.open(path)
    second = await SqliteStore.open(path)
    try:
        a, b = Transitions(first), Transitions(second)
        runs = [(await a.create(spec(task_id=f"t{i}"))).run for i in range(20)]
        await asyncio.gather(
            *(
                (a if i % 2 else b).execute(c.Claim(r.id, SCHEDULER, runtime_instance_id="i"))
                for i, r in enumerate(runs)
            )
        )
        for r in runs:
            events = await first.list_events(r.id, 0, 100)
            assert [e.sequence for e in events] == [1, 2, 3, 4]
    finally:
        await first.close()
        await second.close()
