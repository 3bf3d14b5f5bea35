"""A keyed run keeps the fingerprint of the create that made it (issue #36).

The same idempotency key sent again with a different request was answered with the run the
first request created (REST 200 with run A for body B). A create now compares its own
fingerprint (coordinator/domain/fingerprints.py) with the one the key's run keeps and is
refused with IDEMPOTENCY_KEY_REUSED when they differ (docs/state-model.md "6a. Idempotency keys
and request ids"). The column is nullable and has no default, so adding it is a catalog
change only on PostgreSQL (no table rewrite, a brief lock) and an ALTER TABLE ADD COLUMN on
SQLite; runs without a key, and every run from before this revision, keep NULL, which
matches any request: their keys answer exactly as before.

Revision ID: 0023_run_request_fingerprint
Revises: 0022_lean_event_and_null_indexes
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023_run_request_fingerprint"
down_revision: str | None = "0022_lean_event_and_null_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Appended, so the runs row type keeps RUN_COLUMNS' order (postgres/creates.py).
    op.add_column("runs", sa.Column("request_fingerprint", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("request_fingerprint")
