"""The SQLite store's lease book: the rows heartbeats and runtime lineage keep (lease renewal,
the lease scans, a runtime instance's started attempts, its binding, its lineage and its
replacement). No state column is written here."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from coordinator.domain.model import Attempt
from coordinator.store.rows import attempt_from_row
from coordinator.store.sqlite.connection import SqliteConnections
from coordinator.store.sqlite.sql import (
    BIND_INSTANCE,
    BOUND_OWNER,
    EARLIER_IN_LINEAGE,
    EXPIRED_LEASES,
    MARK_REPLACED,
    RECORD_LINEAGE,
    SILENT_UNKNOWNS,
    STARTED_ATTEMPTS,
    renew_leases_sql,
)


class SqliteLeases(SqliteConnections):
    """The lease book of SqliteStore."""

    async def renew_leases(
        self,
        owner_id: str,
        runtime_instance_id: str,
        attempt_ids: Sequence[str],
        now_ms: int,
        until_ms: int,
        token_until_ms: int = 0,
    ) -> int:
        if not attempt_ids:
            return 0
        sql = renew_leases_sql(len(attempt_ids))

        def run(conn: sqlite3.Connection) -> int:
            self._begin_immediate(conn)
            try:
                cursor = conn.execute(
                    sql,
                    (now_ms, until_ms, token_until_ms, owner_id, runtime_instance_id, *attempt_ids),
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return cursor.rowcount

        async with self._write_lock:
            return await self._write(run)

    async def expired_leases(self, now_ms: int, limit: int) -> Sequence[Attempt]:
        rows = await self.read(EXPIRED_LEASES, now_ms, limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def silent_unknowns(self, silent_since_ms: int, limit: int) -> Sequence[Attempt]:
        rows = await self.read(SILENT_UNKNOWNS, silent_since_ms, limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def started_attempts(self, owner_id: str, runtime_instance_id: str) -> Sequence[Attempt]:
        rows = await self.read(STARTED_ATTEMPTS, owner_id, runtime_instance_id)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def record_lineage(
        self, owner_id: str, runtime_instance_id: str, lineage: str, now_ms: int
    ) -> Sequence[str]:
        def run(conn: sqlite3.Connection) -> list[str]:
            self._begin_immediate(conn)
            try:
                args = (owner_id, runtime_instance_id, lineage, now_ms)
                (first,) = conn.execute(RECORD_LINEAGE, args).fetchone()
                earlier = (owner_id, lineage, first, runtime_instance_id)
                rows = conn.execute(EARLIER_IN_LINEAGE, earlier).fetchall()
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return [row[0] for row in rows]

        async with self._write_lock:
            return await self._write(run)

    async def bind_instance(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> str:
        await self.write(BIND_INSTANCE, runtime_instance_id, owner_id, now_ms)
        rows = await self.read(BOUND_OWNER, runtime_instance_id)
        return str(rows[0][0])

    async def mark_replaced(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> None:
        await self.write(MARK_REPLACED, now_ms, owner_id, runtime_instance_id)
