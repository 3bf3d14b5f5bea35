"""Bring a database to a schema revision with the alembic scripts in ./migrations.

The project speaks plain URLs (``postgresql://...``, ``sqlite:///path``); this module maps
them to SQLAlchemy async URLs and runs alembic on the sync face of an async connection.

Concurrent migrators are safe: on PostgreSQL env.py takes ``pg_advisory_xact_lock`` inside
the migration transaction; on SQLite the migration transaction is ``BEGIN IMMEDIATE``, which
holds the database's write lock from the start. Either way a second process waits, then
finds the schema already at the target revision.

Within one process, alembic keeps its ``context``/``op`` proxies in module globals, so two
migrations interleaved on one event loop would drive each other's connections (and
deadlock on PostgreSQL). Upgrades and downgrades in one event loop are therefore run one
at a time.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

_T = TypeVar("_T")

_alembic_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)

_POSTGRES_PREFIX = "postgresql://"
_SQLITE_PREFIX = "sqlite:///"


def sqlalchemy_url(database_url: str) -> str:
    """Map a plain database URL to the SQLAlchemy async URL for the same database."""
    if database_url.startswith(_POSTGRES_PREFIX):
        return "postgresql+asyncpg://" + database_url[len(_POSTGRES_PREFIX) :]
    if database_url.startswith(_SQLITE_PREFIX) and len(database_url) > len(_SQLITE_PREFIX):
        return "sqlite+aiosqlite:///" + database_url[len(_SQLITE_PREFIX) :]
    raise ValueError(
        "unsupported database URL (expected 'postgresql://user@host:port/dbname' "
        f"or 'sqlite:///path/to/file.db'): {_redact(database_url)!r}"
    )


async def upgrade(database_url: str, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (default: the newest)."""
    async with _alembic_lock():
        await _run(database_url, lambda conn: command.upgrade(_config(conn), revision), wal=True)


async def downgrade(database_url: str, revision: str) -> None:
    """Downgrade the database to ``revision`` (``"base"`` removes every table)."""
    async with _alembic_lock():
        await _run(database_url, lambda conn: command.downgrade(_config(conn), revision))


async def current_revision(database_url: str) -> str | None:
    """The revision the database is at, or None if it was never migrated."""

    def read(conn: Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    return await _run(database_url, read)


def _alembic_lock() -> asyncio.Lock:
    """One alembic run at a time per event loop (see the module docstring)."""
    loop = asyncio.get_running_loop()
    lock = _alembic_locks.get(loop)
    if lock is None:
        lock = _alembic_locks[loop] = asyncio.Lock()
    return lock


def _config(connection: Connection) -> Config:
    config = Config()
    # ConfigParser interpolates '%'; escape it in case the install path contains one.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


async def _run(database_url: str, fn: Callable[[Connection], _T], *, wal: bool = False) -> _T:
    engine = _engine(database_url, wal=wal)
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(fn)
    finally:
        await engine.dispose()


# How long a SQLite migrator waits for another one's write lock (sqlite3's busy timeout,
# 5 s by default): a migration from scratch on a loaded host takes longer than that, and the
# waiter must then find the schema current, not fail "database is locked".
_SQLITE_LOCK_WAIT_S = 120.0


def _engine(database_url: str, *, wal: bool) -> AsyncEngine:
    url = sqlalchemy_url(database_url)
    sqlite = url.startswith("sqlite")
    connect_args = {"timeout": _SQLITE_LOCK_WAIT_S} if sqlite else {}
    engine = create_async_engine(url, poolclass=NullPool, connect_args=connect_args)
    if sqlite:
        _sqlite_immediate_transactions(engine, wal=wal)
    return engine


def _sqlite_immediate_transactions(engine: AsyncEngine, *, wal: bool) -> None:
    """Let SQLAlchemy, not the driver, open SQLite transactions, and open them IMMEDIATE.

    The driver would otherwise begin lazily at the first DML statement, leaving DDL outside
    the transaction; this is SQLAlchemy's documented recipe for (aio)sqlite.
    """

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # autocommit at the driver level
        if wal:
            _enter_wal(dbapi_connection)

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _enter_wal(dbapi_connection: Any) -> None:
    """Switch the file to WAL (persistent in the file; must run outside a transaction).

    Switching needs the file to itself and, unlike a statement, does not wait on SQLite's
    busy handler: while another migrator is switching or holds a lock in the file's first
    (rollback journal) moments, it fails at once with "database is locked". Several
    migrators start together (one per replica), so the switch is tried again until the
    other is done; once the file is WAL the pragma is a no-op that takes no lock.
    """
    deadline = time.monotonic() + _SQLITE_LOCK_WAIT_S
    while True:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except Exception as exc:  # the driver's OperationalError, adapted by SQLAlchemy
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        finally:
            cursor.close()
        time.sleep(0.05)  # a migrator's own process: nothing else waits on this loop


def _redact(database_url: str) -> str:
    """The URL without a password, for error messages."""
    scheme, sep, rest = database_url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if sep and at and ":" in userinfo:
        return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return database_url
