"""The SQLite store's two connections, each on its own thread: one writer, one reader (WAL
lets them overlap). Every write transaction starts with ``BEGIN IMMEDIATE`` so it holds the
write lock before it reads, and a busy database is retried a bounded number of times before
STORE_BUSY is reported (nothing was written then, so a retry can never duplicate an event).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kernel.errors import StoreBusy

T = TypeVar("T")


def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


class SqliteConnections:
    """The threads and connections the reader, the lease book and the writer share."""

    def __init__(self, path: str, busy_timeout_ms: int = 2000, busy_retries: int = 5) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._busy_retries = busy_retries
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="truerun-sqlite-writer")
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="truerun-sqlite-reader")
        self._write_conn: sqlite3.Connection | None = None
        # One transaction at a time on the writer connection (SQLite's single writer).
        self._write_lock = asyncio.Lock()
        self._read_conn: sqlite3.Connection | None = None

    async def close(self) -> None:
        def close_write() -> None:
            if self._write_conn is not None:
                self._write_conn.close()

        def close_read() -> None:
            if self._read_conn is not None:
                self._read_conn.close()

        await asyncio.get_running_loop().run_in_executor(self._writer, close_write)
        await asyncio.get_running_loop().run_in_executor(self._reader, close_read)
        self._writer.shutdown(wait=True)
        self._reader.shutdown(wait=True)

    # -- threads ------------------------------------------------------------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, surely: bool = False) -> T:
        """``fn`` on the writer thread. A cancelled caller withdraws ``fn`` if the thread has
        not started it yet, unless ``surely``: then it runs whatever happens to its caller
        (the ROLLBACK that ends a cancelled transaction must never be withdrawn)."""

        def run() -> T:
            if self._write_conn is None:
                self._write_conn = _connect(self._path, self._busy_timeout_ms)
            return fn(self._write_conn)

        future = asyncio.get_running_loop().run_in_executor(self._writer, run)
        return await (asyncio.shield(future) if surely else future)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            if self._read_conn is None:
                self._read_conn = _connect(self._path, self._busy_timeout_ms)
            return fn(self._read_conn)

        return await asyncio.get_running_loop().run_in_executor(self._reader, run)

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        delay = 0.01
        for attempt in range(self._busy_retries):
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if attempt + 1 == self._busy_retries:
                    break
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        raise StoreBusy(f"the database stayed locked through {self._busy_retries} tries")

    async def read(self, sql: str, *args: Any) -> list[Any]:
        """A read-only query on the reader connection (WAL: never blocked by the writer)."""
        return await self._read(lambda conn: conn.execute(sql, args).fetchall())

    async def write(self, sql: str, *args: Any) -> None:
        """One statement in its own IMMEDIATE transaction."""

        def run(conn: sqlite3.Connection) -> None:
            self._begin_immediate(conn)
            try:
                conn.execute(sql, args)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        async with self._write_lock:
            await self._write(run)
