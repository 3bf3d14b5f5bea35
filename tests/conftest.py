"""Shared fixtures: empty SQLite / PostgreSQL databases, optionally migrated to head.

A migrated database is a copy of a template migrated once per session
(tests/support/schema_templates.py).

PostgreSQL tests never skip: if the server cannot be reached they fail, because CI
requires them to run for real. Point TRUERUN_TEST_PG_ADMIN_URL at another server if needed.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.databases import create_pg_database, drop_pg_database, pg_admin_url
from tests.support.schema_templates import TEMPLATES, migrate

# A run started as a background job of a non-interactive shell (`make test &`) inherits SIGINT
# ignored, and so would every process the tests start: Ctrl-C tests would see a CLI that
# cannot be interrupted. A handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _main_thread_event_loop() -> Iterator[None]:
    """The main thread's current event loop, owned and closed here.

    Without one, pytest-asyncio's runner fixture (asking for "the current loop" to restore
    it later) makes asyncio create a loop implicitly; a later ``asyncio.run()`` in a sync
    test (the fault harness creates its database that way) drops it unclosed, and its
    self-pipe surfaces in whatever test runs at the next garbage collection as an
    unraisable ResourceWarning (a failure here: warnings are errors)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


TESTS = Path(__file__).resolve().parent
#: Suites that start, kill or time real processes: `make pytest` runs them one at a time.
SERIAL_SUITES = frozenset({"faults", "multi", "e2e", "browser", "bench"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that touches PostgreSQL with ``postgres``, and every test of a serial
    suite with ``serial``."""
    for item in items:
        path = Path(str(item.fspath))
        if path.is_relative_to(TESTS) and path.relative_to(TESTS).parts[0] in SERIAL_SUITES:
            item.add_marker(pytest.mark.serial)
        callspec = getattr(item, "callspec", None)
        uses_pg = "pg_url" in getattr(item, "fixturenames", ())
        if uses_pg or (callspec is not None and callspec.params.get("database_url") == "postgres"):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture
async def pg_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh PostgreSQL database (plain URL), dropped after the test: empty, or for a test
    that asks for ``migrated_database_url`` a copy of the session's template made at once
    (one database written, not an empty one and then its copy)."""
    try:
        if "migrated_database_url" in request.fixturenames:
            url = await TEMPLATES.pg_database()
        else:
            url = await create_pg_database()
    except Exception as exc:  # refused, timed out, bad credentials: all mean the same here
        pytest.fail(
            f"PostgreSQL is required but unreachable at {pg_admin_url()} "
            f"(set TRUERUN_TEST_PG_ADMIN_URL): {exc!r}",
            pytrace=False,
        )
    yield url
    await drop_pg_database(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """An empty SQLite database file (plain URL) in the test's tmp_path."""
    return f"sqlite:///{tmp_path}/truerun.db"


@pytest.fixture(params=["sqlite", "postgres"], ids=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    """An empty database of each kind; the postgres variant is marked ``postgres``."""
    fixture = "pg_url" if request.param == "postgres" else "sqlite_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture(scope="session", autouse=True)
def _schema_templates() -> Iterator[None]:
    yield
    # a thread of its own: asyncio.run here would replace the main thread's event loop
    closer = threading.Thread(target=lambda: asyncio.run(TEMPLATES.close()))
    closer.start()
    closer.join()


@pytest.fixture
async def migrated_database_url(database_url: str) -> str:
    """``database_url`` at the newest schema revision (tests/support/schema_templates.py)."""
    await migrate(database_url)
    return database_url
