"""SQLite backend, the embedded default.

The store is three faces over two connections (``connection.py``: one writer thread, one
reader thread, WAL lets them overlap): the reader (``reader.py``, every RunReader read), the
lease book (``leases.py``, the rows heartbeats and runtime lineage keep) and the writer
(``writer.py``: decisions, transactions, output retention). Every statement is in ``sql.py``.
SQLite has one writer: every write transaction starts with ``BEGIN IMMEDIATE`` so it holds the
write lock before it reads, and a busy database is retried a bounded number of times before
STORE_BUSY is reported (nothing was written then, so a retry can never duplicate an event).
"""

from __future__ import annotations

from coordinator.store.sqlite.leases import SqliteLeases
from coordinator.store.sqlite.reader import SqliteReader
from coordinator.store.sqlite.writer import SqliteTx, SqliteWriter

__all__ = ["SqliteStore", "SqliteTx"]


class SqliteStore(SqliteReader, SqliteLeases, SqliteWriter):
    @classmethod
    async def open(
        cls, path: str, busy_timeout_ms: int = 2000, busy_retries: int = 5
    ) -> SqliteStore:
        store = cls(path, busy_timeout_ms, busy_retries)
        await store._write(lambda conn: None)
        await store._read(lambda conn: None)
        return store
