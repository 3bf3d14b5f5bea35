"""The evidence reader and retention by terminality (docs/long-tasks.md "Reading evidence",
"Retention and export"): ``long_task_evidence.unavailable_reason`` (a reference whose target
is gone, marked by the start-up check or by retention), ``long_task_attempts.
evidence_bytes_read`` (the cumulative per-attempt read limit), ``long_tasks.trimmed_at_ms``
(when retention trimmed a finished task's bulky records).

Revision ID: 0015_long_task_evidence_reader
Revises: 0014_long_task_handles_actions
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_long_task_evidence_reader"
down_revision: str | None = "0014_long_task_handles_actions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("long_task_evidence") as batch:
        batch.add_column(sa.Column("unavailable_reason", sa.String(512), nullable=True))
    with op.batch_alter_table("long_task_attempts") as batch:
        batch.add_column(
            sa.Column(
                "evidence_bytes_read", sa.BigInteger(), server_default=sa.text("0"), nullable=False
            )
        )
    with op.batch_alter_table("long_tasks") as batch:
        batch.add_column(sa.Column("trimmed_at_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("long_tasks") as batch:
        batch.drop_column("trimmed_at_ms")
    with op.batch_alter_table("long_task_attempts") as batch:
        batch.drop_column("evidence_bytes_read")
    with op.batch_alter_table("long_task_evidence") as batch:
        batch.drop_column("unavailable_reason")
