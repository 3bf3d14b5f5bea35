"""PostgreSQL backend on the asyncpg driver.

The store is three faces over one pool: the reader (``reader.py``, every RunReader read), the
lease book (``leases.py``, the rows heartbeats and runtime lineage keep) and the writer
(``writer.py`` and ``batch.py``: decisions, transactions, output retention). Every statement
is in ``sql.py``. Statements are built once at import and prepared once per connection (the
driver caches them); connections run with ``plan_cache_mode=force_generic_plan`` so prepared
CTEs do not stick to custom plans.
"""

from __future__ import annotations

import asyncpg

from coordinator.store.postgres.leases import PostgresLeases
from coordinator.store.postgres.reader import PostgresReader
from coordinator.store.postgres.writer import PostgresTx, PostgresWriter

__all__ = ["PostgresStore", "PostgresTx"]


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Replaces asyncpg's default reset on release (unlock all, CLOSE ALL, UNLISTEN, RESET
    ALL): two extra round trips per transition, and RESET ALL would drop the plan cache mode.
    Nothing session-scoped is left behind here: locks are transaction-scoped and asyncpg
    still rolls back a transaction left open."""


class PostgresStore(PostgresReader, PostgresLeases, PostgresWriter):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool

    @classmethod
    async def connect(cls, dsn: str, min_size: int = 2, max_size: int = 20) -> PostgresStore:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            server_settings={"plan_cache_mode": "force_generic_plan"},
            reset=_keep_session,
            statement_cache_size=256,
        )
        return cls(pool)

    async def close(self) -> None:
        await self._pool.close()
