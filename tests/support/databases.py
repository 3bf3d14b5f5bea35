"""Throwaway test databases: a fresh PostgreSQL database per test, created via the admin URL."""

from __future__ import annotations

import os
import uuid

import asyncpg
from sqlalchemy.engine import make_url

DEFAULT_PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE_PREFIX = "truerun_t_"
CONNECT_TIMEOUT_S = 10.0


def pg_admin_url() -> str:
    """Where to create and drop test databases (``TRUERUN_TEST_PG_ADMIN_URL``)."""
    return os.environ.get("TRUERUN_TEST_PG_ADMIN_URL", DEFAULT_PG_ADMIN_URL)


async def create_pg_database(template_url: str | None = None) -> str:
    """Create a uniquely named database, empty or a copy of the (unused) test database at
    ``template_url``, and return its plain ``postgresql://`` URL."""
    name = f"{DATABASE_PREFIX}{uuid.uuid4().hex}"
    copy = ""
    if template_url is not None:
        copy = f" TEMPLATE {_quote(_test_database(template_url, 'copy'))}"
    admin = await asyncpg.connect(pg_admin_url(), timeout=CONNECT_TIMEOUT_S)
    try:
        await admin.execute(f"CREATE DATABASE {_quote(name)}{copy}")
    finally:
        await admin.close()
    url: str = make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    return url


async def replace_pg_database(url: str, template_url: str) -> None:
    """Make the (unused) test database at ``url`` a copy of the one at ``template_url``.

    ``CREATE DATABASE ... TEMPLATE`` copies the files: the copy holds the template's tables,
    rows and alembic stamp, for a fraction of what running the migrations again costs."""
    name, template = _test_database(url, "replace"), _test_database(template_url, "copy")
    admin = await asyncpg.connect(pg_admin_url(), timeout=CONNECT_TIMEOUT_S)
    try:
        await admin.execute(f"DROP DATABASE {_quote(name)}")
        await admin.execute(f"CREATE DATABASE {_quote(name)} TEMPLATE {_quote(template)}")
    finally:
        await admin.close()


async def drop_pg_database(url: str) -> None:
    """Terminate every connection to the database at ``url``, then drop it."""
    name = _test_database(url, "drop")
    admin = await asyncpg.connect(pg_admin_url(), timeout=CONNECT_TIMEOUT_S)
    try:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
        await admin.execute(f"DROP DATABASE IF EXISTS {_quote(name)}")
    finally:
        await admin.close()


def _test_database(url: str, doing: str) -> str:
    """The database name of ``url``, which must be one of the tests' own (never another)."""
    name = make_url(url).database
    if not name or not name.startswith(DATABASE_PREFIX):
        raise ValueError(f"refusing to {doing} {name!r}: not a test database")
    return name


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def redis_test_url() -> str:
    """The Redis database the Redis tests may flush (``TRUERUN_TEST_REDIS_URL``; default db
    15, and under pytest-xdist one database per worker below it: worker gwN gets 15 - N, so
    two workers never flush each other's keys). The fault harness takes dbs 1-12."""
    configured = os.environ.get("TRUERUN_TEST_REDIS_URL")
    if configured:
        return configured
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    if index > 2:
        raise RuntimeError(f"no Redis test database for xdist worker {worker} (at most 3)")
    return f"redis://127.0.0.1:6379/{15 - index}"
