"""Continuations of long tasks (docs/long-tasks.md "Continuations and catch-up"):
``long_task_continuations``, at most one per task, holding a queued task back from the
scheduler until it is due, with its catch-up window and the last catch-up's note.

Revision ID: 0017_long_task_continuations
Revises: 0015_long_task_evidence_reader
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_long_task_continuations"
down_revision: str | None = "0016_run_preflight"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "long_task_continuations",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("expected_version", sa.BigInteger(), nullable=False),
        sa.Column("due_ms", sa.BigInteger(), nullable=True),
        sa.Column(
            "time_zone", sa.String(length=64), server_default=sa.text("'UTC'"), nullable=False
        ),
        sa.Column("cron", sa.String(length=256), nullable=True),
        sa.Column("every_ms", sa.BigInteger(), nullable=True),
        sa.Column("catchup_window_ms", sa.BigInteger(), nullable=False),
        sa.Column("missed_total", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("note", sa.String(length=1024), server_default=sa.text("''"), nullable=False),
        sa.Column("reason", sa.String(length=1024), server_default=sa.text("''"), nullable=False),
        sa.Column("requested_by", sa.String(length=256), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("fired_at_ms", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "kind IN ('at', 'window')", name=op.f("ck_long_task_continuations_continuation_kind")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["long_tasks.id"],
            name=op.f("fk_long_task_continuations_task_id_long_tasks"),
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_long_task_continuations")),
    )
    op.create_index(
        "ix_long_task_continuations_due_ms", "long_task_continuations", ["due_ms"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_long_task_continuations_due_ms", table_name="long_task_continuations")
    op.drop_table("long_task_continuations")
