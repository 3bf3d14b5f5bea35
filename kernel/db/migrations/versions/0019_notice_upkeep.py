"""Notices shown where the person is, and kept only as long as their task
(docs/long-tasks.md "Notices"): ``long_tasks.source_run_id`` (the run a task was promoted
from) and ``long_tasks.source_ref`` (a creator's reference, like a chat thread's URL), both
copied onto each notice with the command that answers it (``long_task_notices.command``);
indexes by task and by notice so retention trims a finished task's notices and deliveries
without a scan.

Revision ID: 0019_notice_upkeep
Revises: 0018_notices
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_notice_upkeep"
down_revision: str | None = "0018_notices"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("long_tasks") as batch:
        batch.add_column(sa.Column("source_run_id", sa.String(length=64), nullable=True))
        batch.add_column(
            sa.Column(
                "source_ref", sa.String(length=2048), server_default=sa.text("''"), nullable=False
            )
        )
    with op.batch_alter_table("long_task_notices") as batch:
        batch.add_column(sa.Column("source_run_id", sa.String(length=64), nullable=True))
        batch.add_column(
            sa.Column(
                "source_ref", sa.String(length=2048), server_default=sa.text("''"), nullable=False
            )
        )
        batch.add_column(
            sa.Column(
                "command", sa.String(length=512), server_default=sa.text("''"), nullable=False
            )
        )
    op.create_index("ix_long_task_notices_task", "long_task_notices", ["task_id"])
    op.create_index(
        "ix_long_task_notice_deliveries_notice", "long_task_notice_deliveries", ["notice_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_long_task_notice_deliveries_notice", table_name="long_task_notice_deliveries")
    op.drop_index("ix_long_task_notices_task", table_name="long_task_notices")
    with op.batch_alter_table("long_task_notices") as batch:
        batch.drop_column("command")
        batch.drop_column("source_ref")
        batch.drop_column("source_run_id")
    with op.batch_alter_table("long_tasks") as batch:
        batch.drop_column("source_ref")
        batch.drop_column("source_run_id")
