"""Room for HOT updates on runs and attempts (PostgreSQL).

A run's row is updated about three times in its life and its attempt's three times plus every
lease renewal, each update writing a new row version. When the new version fits on the same
page and no indexed column changed, PostgreSQL keeps it there (a HOT update) and writes no
index entry at all; on full pages (the default fillfactor of 100) every update is a new entry
in every index of the table. A fillfactor of 70 keeps 30% of each page free for those
versions. It applies to pages written from now on (no rewrite, no long lock). SQLite has no
such setting: nothing to do there.

Revision ID: 0021_run_fillfactor
Revises: 0020_slim_run_indexes
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0021_run_fillfactor"
down_revision: str | None = "0020_slim_run_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("runs", "attempts")
FILLFACTOR = 70


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
