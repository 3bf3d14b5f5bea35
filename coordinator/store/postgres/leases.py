"""The PostgreSQL store's lease book: the rows heartbeats and runtime lineage keep (lease
renewal, the lease scans, a runtime instance's started attempts, its binding, its lineage and
its replacement). No state column is written here."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from coordinator.domain.model import Attempt
from coordinator.store.postgres.sql import (
    BIND_INSTANCE,
    EARLIER_IN_LINEAGE,
    EXPIRED_LEASES,
    MARK_REPLACED,
    RECORD_LINEAGE,
    RENEW_LEASES,
    SILENT_UNKNOWNS,
    STARTED_ATTEMPTS,
)
from coordinator.store.rows import attempt_from_row


class PostgresLeases:
    """The lease book of PostgresStore, on its pool."""

    _pool: asyncpg.Pool

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
        status = await self._pool.execute(
            RENEW_LEASES,
            owner_id,
            runtime_instance_id,
            now_ms,
            until_ms,
            list(attempt_ids),
            token_until_ms,
        )
        return int(status.split()[-1])

    async def expired_leases(self, now_ms: int, limit: int) -> Sequence[Attempt]:
        rows = await self._pool.fetch(EXPIRED_LEASES, now_ms, limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def silent_unknowns(self, silent_since_ms: int, limit: int) -> Sequence[Attempt]:
        rows = await self._pool.fetch(SILENT_UNKNOWNS, silent_since_ms, limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def started_attempts(self, owner_id: str, runtime_instance_id: str) -> Sequence[Attempt]:
        rows = await self._pool.fetch(STARTED_ATTEMPTS, owner_id, runtime_instance_id)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def record_lineage(
        self, owner_id: str, runtime_instance_id: str, lineage: str, now_ms: int
    ) -> Sequence[str]:
        async with self._pool.acquire() as conn, conn.transaction():
            first = await conn.fetchval(
                RECORD_LINEAGE, owner_id, runtime_instance_id, lineage, now_ms
            )
            rows = await conn.fetch(
                EARLIER_IN_LINEAGE, owner_id, lineage, first, runtime_instance_id
            )
        return [row[0] for row in rows]

    async def bind_instance(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> str:
        return str(await self._pool.fetchval(BIND_INSTANCE, runtime_instance_id, owner_id, now_ms))

    async def mark_replaced(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> None:
        await self._pool.execute(MARK_REPLACED, owner_id, runtime_instance_id, now_ms)
