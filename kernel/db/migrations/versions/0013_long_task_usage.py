"""long_task_usage: the token usage the attempts' runtimes report, one row per usage id
(its primary key makes a repeated report count once; long_tasks.tokens_used is the sum).

Revision ID: 0013_long_task_usage
Revises: 0012_long_task_step_action
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_long_task_usage"
down_revision: str | None = "0012_long_task_step_action"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "long_task_usage",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("usage_id", sa.String(length=128), nullable=False),
        sa.Column("attempt_id", sa.String(length=64), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("tokens > 0", name=op.f("ck_long_task_usage_tokens_positive")),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_usage_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint("task_id", "usage_id", name=op.f("pk_long_task_usage")),
    )


def downgrade() -> None:
    op.drop_table("long_task_usage")
