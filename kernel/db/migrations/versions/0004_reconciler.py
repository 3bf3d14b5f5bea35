"""Reconciler: runs.recovery_count, how often the reconciler recovered a run (an expired claim
requeued, a lost attempt retried) since creation or an operator's requeue; past
TRUERUN_MAX_RECOVERIES the run is dead-lettered (docs/state-model.md "Operator commands").

Revision ID: 0004_reconciler
Revises: 0003_event_cursor
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_reconciler"
down_revision: str | None = "0003_event_cursor"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "runs",
        sa.Column("recovery_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("recovery_count")
