"""Fewer index entries per run: run_events keyed by (run_id, sequence), and the indexes on
nullable scope and agent columns hold only rows that have one (docs/indexes.md).

- ``run_events``: no statement reads an event by ``id`` (every read goes by run and sequence,
  by dedupe key or by the feed cursor), yet its primary key index took an entry for each of
  the ~10 events of a run. The primary key is now ``(run_id, sequence)``, which was already
  unique (``uq_run_events_run_sequence``, dropped: the key's index is the same one). ``id``
  stays, not null, as the event's public id.
- ``ix_runs_scope_status``, ``ix_attempts_scope_status`` and ``ix_attempts_agent_status`` are
  partial (``... IS NOT NULL``): every statement that reads them compares the column with
  ``=`` or ``IN`` (which no NULL satisfies), so the rows without a scope or an agent, most
  runs, no longer write an entry on each insert and non-HOT update.

On PostgreSQL the new primary key and the partial indexes are built while the migration holds
the table's lock (a build over the existing rows); SQLite copies run_events into the new
shape (its primary key cannot change in place).

Revision ID: 0022_lean_event_and_null_indexes
Revises: 0021_run_fillfactor
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022_lean_event_and_null_indexes"
down_revision: str | None = "0021_run_fillfactor"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (name, table, columns, the column that must be set) of the indexes made partial.
_PARTIAL = (
    ("ix_runs_scope_status", "runs", ["execution_scope", "status"], "execution_scope"),
    ("ix_attempts_scope_status", "attempts", ["execution_scope", "status"], "execution_scope"),
    ("ix_attempts_agent_status", "attempts", ["agent_id", "status"], "agent_id"),
)


def upgrade() -> None:
    for name, table, columns, column in _PARTIAL:
        op.drop_index(name, table_name=table)
        clause = sa.text(f"{column} IS NOT NULL")
        op.create_index(name, table, columns, postgresql_where=clause, sqlite_where=clause)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE run_events DROP CONSTRAINT pk_run_events, "
            "DROP CONSTRAINT uq_run_events_run_sequence, "
            "ADD CONSTRAINT pk_run_events PRIMARY KEY (run_id, sequence)"
        )
        return
    with op.batch_alter_table("run_events", recreate="always") as batch:
        batch.drop_constraint("uq_run_events_run_sequence", type_="unique")
        batch.drop_constraint("pk_run_events", type_="primary")
        batch.create_primary_key("pk_run_events", ["run_id", "sequence"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE run_events DROP CONSTRAINT pk_run_events, "
            "ADD CONSTRAINT pk_run_events PRIMARY KEY (id), "
            "ADD CONSTRAINT uq_run_events_run_sequence UNIQUE (run_id, sequence)"
        )
    else:
        with op.batch_alter_table("run_events", recreate="always") as batch:
            batch.drop_constraint("pk_run_events", type_="primary")
            batch.create_primary_key("pk_run_events", ["id"])
            batch.create_unique_constraint("uq_run_events_run_sequence", ["run_id", "sequence"])
    for name, table, columns, _ in _PARTIAL:
        op.drop_index(name, table_name=table)
        op.create_index(name, table, columns)
