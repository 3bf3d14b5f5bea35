"""Migrated test databases at a fraction of the cost: one template per kind, copied.

The first test of a session that needs a database at the newest revision migrates a
template of its kind; every later one gets a copy (a file copy on SQLite, ``CREATE DATABASE
... TEMPLATE`` on PostgreSQL): the same schema, rows and alembic stamp as running the
migrations again. The migrations themselves are exercised step by step in
tests/integration/test_migrations.py. A database that already has tables is upgraded in
place instead (a no-op at head), so nothing a test wrote is ever replaced.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import asyncpg

from kernel.db.migrate import upgrade
from tests.support.databases import (
    CONNECT_TIMEOUT_S,
    create_pg_database,
    drop_pg_database,
    replace_pg_database,
)

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIX = "postgresql://"


class SchemaTemplates:
    """The session's templates, made on first use; ``close`` drops the PostgreSQL one."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._sqlite: Path | None = None
        self._pg_url: str | None = None
        self._copies: set[str] = set()

    async def pg_database(self) -> str:
        """A new PostgreSQL test database at the newest revision, made as a copy at once."""
        url = await create_pg_database(await self.pg_template())
        self._copies.add(url)
        return url

    async def migrate(self, database_url: str) -> None:
        """Bring ``database_url`` to the newest revision: a copy when it is empty."""
        if database_url in self._copies:
            return
        if database_url.startswith(SQLITE_PREFIX):
            path = Path(database_url[len(SQLITE_PREFIX) :])
            if path.exists() and path.stat().st_size > 0:
                await upgrade(database_url)
            else:
                shutil.copyfile(await self._sqlite_template(), path)
        elif database_url.startswith(POSTGRES_PREFIX) and await _pg_is_empty(database_url):
            await replace_pg_database(database_url, await self.pg_template())
        else:
            await upgrade(database_url)

    async def close(self) -> None:
        if self._pg_url is not None:
            await drop_pg_database(self._pg_url)
            self._pg_url = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def _sqlite_template(self) -> Path:
        if self._sqlite is None:
            self._dir = Path(tempfile.mkdtemp(prefix="truerun-schema-"))
            template = self._dir / "template.db"
            await upgrade(f"{SQLITE_PREFIX}{template}")
            # closing the last connection checkpointed the WAL: the main file is complete
            assert not template.with_name("template.db-wal").exists()
            self._sqlite = template
        return self._sqlite

    async def pg_template(self) -> str:
        """The session's PostgreSQL template (made on first use); never connect to it."""
        if self._pg_url is None:
            url = await create_pg_database()
            await upgrade(url)
            self._pg_url = url
        return self._pg_url


async def _pg_is_empty(database_url: str) -> bool:
    connection = await asyncpg.connect(database_url, timeout=CONNECT_TIMEOUT_S)
    try:
        has_tables = await connection.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = 'public')"
        )
    finally:
        await connection.close()
    return not has_tables


TEMPLATES = SchemaTemplates()


async def migrate(database_url: str) -> None:
    """``database_url`` at the newest revision (see the module docstring)."""
    await TEMPLATES.migrate(database_url)
