"""A caller cancelled while its SQLite transaction waits for BEGIN leaves no transaction open
on the writer connection (found by CI: a runtime stream cancelled at reconnect made every
later write fail with "cannot start a transaction within a transaction")."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from coordinator.store.sqlite import SqliteStore
from kernel.db.migrate import upgrade


async def test_a_transaction_cancelled_before_its_begin_ran_is_rolled_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    await upgrade(f"sqlite:///{path}")
    store = await SqliteStore.open(str(path))
    try:
        # Another process holds the write lock: the store's BEGIN IMMEDIATE is running on
        # its writer thread, waiting for the lock, when its caller is cancelled.
        other = sqlite3.connect(str(path), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        entered = asyncio.Event()

        async def writer() -> None:
            async with store.transaction([]):
                entered.set()

        begun = threading.Event()
        original = store._begin_immediate

        def begin(conn: sqlite3.Connection) -> None:
            begun.set()  # on the writer thread: BEGIN is running now, no longer cancellable
            original(conn)

        store._begin_immediate = begin  # type: ignore[method-assign]
        task = asyncio.ensure_future(writer())
        assert await asyncio.get_running_loop().run_in_executor(None, begun.wait, 5)
        task.cancel()
        other.execute("ROLLBACK")  # the BEGIN now gets the lock, after its caller is gone
        other.close()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled() and not entered.is_set()
        open_after = await store._write(lambda conn: conn.in_transaction)
        assert open_after is False
        async with store.transaction([]) as tx:  # the next writer is not refused
            rows = await tx.fetch("SELECT 1")
        assert [tuple(r) for r in rows] == [(1,)]
    finally:
        await store.close()


def test_sqlite3_refuses_a_nested_begin() -> None:
    """What the bug looked like, so the test above checks the right thing."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        assert "within a transaction" in str(exc)
    else:
        raise AssertionError("sqlite3 allowed a nested BEGIN")


async def test_a_transaction_cancelled_twice_in_its_body_is_still_rolled_back(
    tmp_path: Path,
) -> None:
    """The first cancel lands while the body's statement runs on the writer thread, so the
    ROLLBACK waits behind it; the second lands while the ROLLBACK still waits, and must not
    withdraw it (found by CI: every later write failed "within a transaction")."""
    path = tmp_path / "t.db"
    await upgrade(f"sqlite:///{path}")
    store = await SqliteStore.open(str(path))
    try:
        running, release = threading.Event(), threading.Event()

        def statement(conn: sqlite3.Connection) -> None:
            running.set()
            release.wait(10)

        async def writer() -> None:
            async with store.transaction([]):
                await store._write(statement)

        task = asyncio.ensure_future(writer())
        assert await asyncio.get_running_loop().run_in_executor(None, running.wait, 5)
        task.cancel()
        # One step of the loop: the task takes the cancel into the body and queues the
        # ROLLBACK behind the statement, which still holds the writer thread.
        await asyncio.sleep(0)
        assert not task.done()
        task.cancel()
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        assert await store._write(lambda conn: conn.in_transaction) is False
        async with store.transaction([]) as tx:  # the next writer is not refused
            rows = await tx.fetch("SELECT 1")
        assert [tuple(r) for r in rows] == [(1,)]
    finally:
        await store.close()
