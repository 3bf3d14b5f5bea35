"""The alembic migrations produce exactly kernel/db/schema.py, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    CheckConstraint,
    ForeignKeyConstraint,
    Identity,
    UniqueConstraint,
    inspect,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from coordinator.store.rows import ATTEMPT_COLUMNS, RUN_COLUMNS
from kernel.db.migrate import current_revision, downgrade, sqlalchemy_url, upgrade
from kernel.db.schema import metadata

HEAD = "0024_run_approvals"
PROJECT_TABLES = set(metadata.tables)

T = TypeVar("T")
# table -> {"columns": ..., "indexes": ..., "constraints": ...}, all as sets of names
Shape = dict[str, dict[str, set[str]]]


async def on_database(url: str, fn: Callable[[Connection], T]) -> T:
    engine = create_async_engine(sqlalchemy_url(url), poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(fn)
    finally:
        await engine.dispose()


def expected_shape() -> Shape:
    shape: Shape = {}
    for table in metadata.tables.values():
        kinds = (CheckConstraint, ForeignKeyConstraint, UniqueConstraint)
        shape[table.name] = {
            "columns": {c.name for c in table.columns},
            "indexes": {str(i.name) for i in table.indexes},
            "constraints": {str(c.name) for c in table.constraints if isinstance(c, kinds)}
            | {str(table.primary_key.name)},
        }
    return shape


def reflected_shape(conn: Connection) -> Shape:
    insp = inspect(conn)
    shape: Shape = {}
    for name in set(insp.get_table_names()) & PROJECT_TABLES:
        constraints = {insp.get_pk_constraint(name)["name"]}
        constraints |= {fk["name"] for fk in insp.get_foreign_keys(name)}
        constraints |= {uq["name"] for uq in insp.get_unique_constraints(name)}
        constraints |= {ck["name"] for ck in insp.get_check_constraints(name)}
        shape[name] = {
            "columns": {c["name"] for c in insp.get_columns(name)},
            # PostgreSQL also lists the index behind each UNIQUE constraint; that is the
            # constraint (checked below), not an index of its own.
            "indexes": {
                str(i["name"]) for i in insp.get_indexes(name) if "duplicates_constraint" not in i
            },
            "constraints": {str(c) for c in constraints},
        }
    return shape


def project_tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names()) & PROJECT_TABLES


def schema_differences(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn, opts={"compare_type": True, "compare_server_default": True}
    )
    return [d for d in compare_metadata(context, metadata) if not _sqlite_identity(conn, d)]


def _sqlite_identity(conn: Connection, diff: Any) -> bool:
    """SQLite has no identity columns (the store numbers run_events.position itself), so the
    Identity() that PostgreSQL honours is not a drift there."""
    return (
        conn.dialect.name == "sqlite"
        and isinstance(diff, list)
        and len(diff) == 1
        and diff[0][0] == "modify_default"
        and isinstance(diff[0][-1], Identity)
    )


async def test_upgrade_downgrade_upgrade_round_trip(database_url: str) -> None:
    assert await current_revision(database_url) is None

    await upgrade(database_url)
    assert await current_revision(database_url) == HEAD
    assert await on_database(database_url, reflected_shape) == expected_shape()

    await downgrade(database_url, "base")
    assert await current_revision(database_url) is None
    assert await on_database(database_url, project_tables) == set()

    await upgrade(database_url)
    assert await current_revision(database_url) == HEAD
    assert await on_database(database_url, reflected_shape) == expected_shape()


async def test_migrated_database_does_not_drift_from_schema(migrated_database_url: str) -> None:
    assert await on_database(migrated_database_url, schema_differences) == []


async def test_upgrade_at_head_changes_nothing(migrated_database_url: str) -> None:
    before = await on_database(migrated_database_url, reflected_shape)
    await upgrade(migrated_database_url)
    assert await current_revision(migrated_database_url) == HEAD
    assert await on_database(migrated_database_url, reflected_shape) == before


async def test_concurrent_upgrades_in_one_process(database_url: str) -> None:
    await asyncio.gather(*(upgrade(database_url) for _ in range(4)))
    assert await current_revision(database_url) == HEAD
    assert await on_database(database_url, reflected_shape) == expected_shape()


async def test_concurrent_upgrades_from_several_processes(database_url: str) -> None:
    script = "import asyncio, sys; from kernel.db.migrate import upgrade; "
    script += "asyncio.run(upgrade(sys.argv[1]))"
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, database_url, stderr=asyncio.subprocess.PIPE
        )
        for _ in range(4)
    ]
    results = [await p.communicate() for p in processes]
    assert [
        (p.returncode, err.decode()) for p, (_, err) in zip(processes, results, strict=True)
    ] == [(0, "")] * 4
    assert await current_revision(database_url) == HEAD
    assert await on_database(database_url, reflected_shape) == expected_shape()


async def test_a_migrator_waits_while_another_holds_a_new_sqlite_file(sqlite_url: str) -> None:
    # A new file is still in rollback-journal mode; a migrator starting while another holds
    # its lock cannot switch it to WAL (SQLite refuses at once, without its busy wait) and
    # must try again rather than exit "database is locked" (kernel/db/migrate.py _enter_wal).
    path = sqlite_url.removeprefix("sqlite:///")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE held_meanwhile (x INTEGER)")
    released: list[bool] = []

    def release() -> None:
        holder.execute("COMMIT")
        released.append(True)

    asyncio.get_running_loop().call_later(0.5, release)
    try:
        await upgrade(sqlite_url)
    finally:
        holder.close()
    assert released, "the upgrade finished while the other connection still held the file"
    assert await current_revision(sqlite_url) == HEAD


@pytest.mark.parametrize(
    ("plain", "expected"),
    [
        (
            "postgresql://postgres@127.0.0.1:5432/db",
            "postgresql+asyncpg://postgres@127.0.0.1:5432/db",
        ),
        ("sqlite:///relative.db", "sqlite+aiosqlite:///relative.db"),
        ("sqlite:////abs/path.db", "sqlite+aiosqlite:////abs/path.db"),
    ],
)
def test_sqlalchemy_url_maps_plain_urls(plain: str, expected: str) -> None:
    assert sqlalchemy_url(plain) == expected


@pytest.mark.parametrize(
    "bad", ["mysql://u@h/db", "postgresql+asyncpg://u@h/db", "sqlite://", "sqlite:///", ""]
)
def test_sqlalchemy_url_rejects_other_urls(bad: str) -> None:
    with pytest.raises(ValueError, match="unsupported database URL"):
        sqlalchemy_url(bad)


# The run tables' primary keys, unique constraints and indexes: everything an insert or a
# non-HOT update writes an entry into, so each one is there because a statement's plan uses
# it (docs/indexes.md; the plans: test_index_plans.py).
RUN_TABLE_INDEXES = {
    "runs": {
        "pk_runs",
        "ix_runs_claim_order",
        "ix_runs_owner_created",
        "ix_runs_project_created",
        "ix_runs_scope_status",
        "ix_runs_status_queued",
        "ix_runs_task_created",
        "uq_runs_project_idempotency_key",
    },
    "attempts": {
        "pk_attempts",
        "ix_attempts_agent_status",
        "ix_attempts_runtime_capacity",
        "ix_attempts_scope_status",
        "ix_attempts_status_lease",
        "uq_attempts_run_attempt_no",
    },
    "run_events": {
        "pk_run_events",
        "ix_run_events_project_id_tx_id_position",
        "ix_run_events_tx_id_position",
        "uq_run_events_run_dedupe_key",
    },
}
# What 0020_slim_run_indexes dropped and 0022 folded into the primary key; their downgrades
# put them back.
BEFORE_0020 = {
    "runs": {"ix_runs_status_cancel_requested", "ix_runs_retry_of"},
    "attempts": {"ix_attempts_status_created"},
    "run_events": {"ix_run_events_created", "uq_run_events_run_sequence"},
}


def maintained(conn: Connection) -> dict[str, set[str]]:
    """Per run table, the names of everything an insert writes an entry into. SQLite names
    a UNIQUE constraint's index automatically (``sqlite_autoindex_*``) and has no named
    primary key index; the constraint names stand for them."""
    insp = inspect(conn)
    shape: dict[str, set[str]] = {}
    for table in RUN_TABLE_INDEXES:
        names = {str(i["name"]) for i in insp.get_indexes(table)}
        names |= {str(u["name"]) for u in insp.get_unique_constraints(table)}
        names.add(str(insp.get_pk_constraint(table)["name"]))
        shape[table] = {n for n in names if not n.startswith("sqlite_autoindex_")}
    return shape


async def test_run_tables_keep_only_the_indexes_a_statement_uses(
    migrated_database_url: str,
) -> None:
    assert await on_database(migrated_database_url, maintained) == RUN_TABLE_INDEXES


async def test_downgrade_puts_the_dropped_indexes_back(migrated_database_url: str) -> None:
    await downgrade(migrated_database_url, "0019_notice_upkeep")
    before = {
        table: names | BEFORE_0020.get(table, set()) for table, names in RUN_TABLE_INDEXES.items()
    }
    assert await on_database(migrated_database_url, maintained) == before
    await upgrade(migrated_database_url)
    assert await on_database(migrated_database_url, maintained) == RUN_TABLE_INDEXES


def fillfactors(conn: Connection) -> dict[str, str]:
    """PostgreSQL's storage options of the tables whose rows are updated in place."""
    rows = conn.exec_driver_sql(
        "SELECT relname, array_to_string(reloptions, ',') FROM pg_class "
        "WHERE relname IN ('runs', 'attempts') AND relkind = 'r'"
    ).all()
    return {str(name): str(options or "") for name, options in rows}


async def test_run_rows_leave_room_for_hot_updates(pg_url: str) -> None:
    await upgrade(pg_url)
    assert await on_database(pg_url, fillfactors) == {
        "runs": "fillfactor=70",
        "attempts": "fillfactor=70",
    }
    await downgrade(pg_url, "0020_slim_run_indexes")
    assert await on_database(pg_url, fillfactors) == {"runs": "", "attempts": ""}
    await upgrade(pg_url)
    assert (await on_database(pg_url, fillfactors))["runs"] == "fillfactor=70"


def row_type_fields(conn: Connection) -> dict[str, list[str]]:
    """The fields of the row types PostgreSQL made for the run tables, in order (dropped
    columns are not fields)."""
    rows = conn.exec_driver_sql(
        "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "WHERE c.relname IN ('runs', 'attempts') AND c.relkind = 'r' "
        "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY c.relname, a.attnum"
    ).all()
    fields: dict[str, list[str]] = {}
    for table, column in rows:
        fields.setdefault(str(table), []).append(str(column))
    return fields


async def test_run_row_types_keep_the_column_order_the_group_insert_sends(pg_url: str) -> None:
    """The group insert (coordinator/store/postgres/creates.py) and the event batch update
    (BATCH_UPDATE in postgres/sql.py) send runs and attempts as arrays of the tables' own row
    types, each row's values in RUN_COLUMNS / ATTEMPT_COLUMNS order: a migration that added a
    column anywhere but where kernel/db/schema.py has it would shift every field."""
    await upgrade(pg_url)
    assert await on_database(pg_url, row_type_fields) == {
        "attempts": list(ATTEMPT_COLUMNS),
        "runs": list(RUN_COLUMNS),
    }


# The indexes 0022 made partial, and the column each requires.
PARTIAL_0022 = {
    "ix_runs_scope_status": "execution_scope",
    "ix_attempts_scope_status": "execution_scope",
    "ix_attempts_agent_status": "agent_id",
}


def event_key_and_partials(conn: Connection) -> tuple[list[str], dict[str, str]]:
    """run_events' primary key columns, and each 0022 index's predicate ("" when full)."""
    insp = inspect(conn)
    key = list(insp.get_pk_constraint("run_events")["constrained_columns"])
    where: dict[str, str] = {}
    for table in ("runs", "attempts"):
        for index in insp.get_indexes(table):
            if index["name"] in PARTIAL_0022:
                options = index.get("dialect_options", {})
                clause = options.get("postgresql_where", options.get("sqlite_where"))
                text = "" if clause is None else str(clause).strip("()").lower()
                where[str(index["name"])] = text
    return key, where


_RUN = (
    "INSERT INTO runs (id, project_id, owner_id, task_id, trigger_type, status, version, "
    "event_sequence, created_by, created_at_ms, updated_at_ms) "
    "VALUES ('r1', 'p', 'o', 't', 'api', 'queued', 2, 2, 'u', 1, 1)"
)
_EVENT = (
    "INSERT INTO run_events (id, run_id, sequence, type, actor_type, created_at_ms, project_id, "
    "position) VALUES ('{id}', 'r1', {seq}, 'run.created', 'user', 1, 'p', {seq})"
)


def seed_events(conn: Connection) -> None:
    conn.exec_driver_sql(_RUN)
    for seq in (1, 2):
        conn.exec_driver_sql(_EVENT.format(id=f"e{seq}", seq=seq))
    conn.commit()


def events(conn: Connection) -> list[tuple[Any, ...]]:
    rows = conn.exec_driver_sql("SELECT id, run_id, sequence FROM run_events ORDER BY sequence")
    return [tuple(row) for row in rows]


def duplicate_sequence_refused(conn: Connection) -> bool:
    try:
        conn.exec_driver_sql(_EVENT.format(id="e9", seq=2))
    except Exception:  # IntegrityError, wrapped by the async bridge's dialect
        conn.rollback()
        return True
    conn.rollback()
    return False


async def test_events_keyed_by_run_and_sequence_and_null_columns_unindexed(
    migrated_database_url: str,
) -> None:
    url = migrated_database_url
    partial = {name: f"{column} is not null" for name, column in PARTIAL_0022.items()}
    assert await on_database(url, event_key_and_partials) == (["run_id", "sequence"], partial)

    await downgrade(url, "0021_run_fillfactor")
    assert await on_database(url, event_key_and_partials) == (["id"], dict.fromkeys(partial, ""))
    await on_database(url, seed_events)
    await upgrade(url)
    # The events written before 0022 are all there, under the new key, which still refuses a
    # second event with the same run and sequence.
    assert await on_database(url, events) == [("e1", "r1", 1), ("e2", "r1", 2)]
    assert await on_database(url, event_key_and_partials) == (["run_id", "sequence"], partial)
    assert await on_database(url, duplicate_sequence_refused)
