"""attempts.sync_reason: why an attempt's sync went stale, in words a person can check (its
runtime is up but no longer lists the task, the lease lapsed at T, the start went
unanswered); shown as the reason of `unknown` (docs/state-model.md).

Revision ID: 0006_attempt_sync_reason
Revises: 0005_runtime_lineage
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_attempt_sync_reason"
down_revision: str | None = "0005_runtime_lineage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("sync_reason", sa.String(512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("sync_reason")
