"""Only the indexes a statement's plan uses on runs, attempts and run_events (docs/indexes.md).

Every index costs an entry on each insert and each non-HOT update, and a run's lifecycle
writes about 4 runs rows, 4 attempts rows and 10 events. No statement's plan (generic plans
on a seeded PostgreSQL database, and SQLite's) uses ``ix_runs_retry_of`` (no run is ever
deleted, so its foreign key needs no index on the referencing side),
``ix_attempts_status_created`` or ``ix_run_events_created`` (nothing reads events by creation
time). ``ix_runs_status_cancel_requested`` served its statements only by its ``status``
prefix, which ``ix_runs_status_queued`` has too. Dropping an index is quick and builds
nothing, so the upgrade holds its locks only briefly; the downgrade re-creates them.

Revision ID: 0020_slim_run_indexes
Revises: 0019_notice_upkeep
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020_slim_run_indexes"
down_revision: str | None = "0019_notice_upkeep"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (name, table, columns) of the indexes this revision drops, as 0001-0002 created them.
_DROPPED = (
    ("ix_runs_status_cancel_requested", "runs", ["status", "cancel_requested_at_ms"]),
    ("ix_runs_retry_of", "runs", ["retry_of_run_id"]),
    ("ix_attempts_status_created", "attempts", ["status", "created_at_ms"]),
    ("ix_run_events_created", "run_events", ["created_at_ms"]),
)


def upgrade() -> None:
    for name, table, _ in _DROPPED:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for name, table, columns in _DROPPED:
        op.create_index(name, table, columns)
