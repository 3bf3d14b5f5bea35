"""Alembic environment: online only, on a connection handed in by kernel.db.migrate.

The same scripts run on SQLite and PostgreSQL. There is no alembic.ini: the Config is built
in code and carries the open (sync-facing) connection in ``config.attributes["connection"]``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from kernel.db.schema import metadata

# Any fixed 64-bit key will do; every truerun process migrating PostgreSQL uses this one.
MIGRATION_LOCK_KEY = 0x7472756572756E  # "truerun"


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError(
            "run migrations through kernel.db.migrate; offline (SQL script) mode is not supported"
        )
    is_sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=is_sqlite,  # SQLite cannot ALTER most things; batch copies the table.
        compare_type=True,
        compare_server_default=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Serialize concurrent migrators: the lock is held until the migration
            # transaction ends, so a second process waits and then finds the schema at head.
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")
run_migrations_online()
