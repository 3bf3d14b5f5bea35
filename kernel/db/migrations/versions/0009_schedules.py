"""schedules and schedule_events: schedules and triggers that fire exactly once per fire
time (issue #17, docs/automations.md).

Revision ID: 0009_schedules
Revises: 0008_attempt_output
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_schedules"
down_revision: str | None = "0008_attempt_output"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    big, text = sa.BigInteger(), sa.Text()
    op.create_table(
        "schedules",
        sa.Column("project_id", sa.String(128), nullable=False),
        sa.Column("schedule_id", sa.String(128), nullable=False),
        sa.Column("version", big, nullable=False),
        sa.Column("display_name", sa.String(256), nullable=False, server_default=sa.text("''")),
        sa.Column("template", text, nullable=False),
        sa.Column("timing", sa.String(16), nullable=False),
        sa.Column("cron", sa.String(256), nullable=True),
        sa.Column("every_ms", big, nullable=True),
        sa.Column("offset_ms", big, nullable=True),
        sa.Column("at_ms", big, nullable=True),
        sa.Column("time_zone", sa.String(64), nullable=False),
        sa.Column("start_ms", big, nullable=True),
        sa.Column("end_ms", big, nullable=True),
        sa.Column("jitter_ms", big, nullable=False, server_default=sa.text("0")),
        sa.Column("overlap", sa.String(32), nullable=False),
        sa.Column("catchup_window_ms", big, nullable=False),
        sa.Column("catchup", sa.String(16), nullable=False),
        sa.Column("webhook_generation", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("pause_note", sa.String(512), nullable=False, server_default=sa.text("''")),
        sa.Column("next_fire_ms", big, nullable=True),
        sa.Column("wake_ms", big, nullable=True),
        sa.Column("buffered", text, nullable=False, server_default=sa.text("'[]'")),
        sa.Column("open_runs", text, nullable=False, server_default=sa.text("'[]'")),
        sa.Column("last_fire_ms", big, nullable=True),
        sa.Column("last_run_id", sa.String(64), nullable=True),
        sa.Column("last_outcome", sa.String(512), nullable=False, server_default=sa.text("''")),
        sa.Column("missed_total", big, nullable=False, server_default=sa.text("0")),
        sa.Column("created_by", sa.String(256), nullable=False),
        sa.Column("created_at_ms", big, nullable=False),
        sa.Column("updated_at_ms", big, nullable=False),
        sa.PrimaryKeyConstraint("project_id", "schedule_id", name="pk_schedules"),
    )
    op.create_index("ix_schedules_wake", "schedules", ["wake_ms"])
    op.create_table(
        "schedule_events",
        sa.Column("project_id", sa.String(128), nullable=False),
        sa.Column("schedule_id", sa.String(128), nullable=False),
        sa.Column("sequence", big, nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("fire_ms", big, nullable=True),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("message", sa.String(1024), nullable=False),
        sa.Column("actor_type", sa.String(32), nullable=False),
        sa.Column("actor_id", sa.String(256), nullable=False),
        sa.Column("created_at_ms", big, nullable=False),
        sa.PrimaryKeyConstraint("project_id", "schedule_id", "sequence", name="pk_schedule_events"),
    )


def downgrade() -> None:
    op.drop_table("schedule_events")
    op.drop_index("ix_schedules_wake", table_name="schedules")
    op.drop_table("schedules")
