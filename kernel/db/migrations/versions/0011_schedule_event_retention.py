"""schedule_events by creation time: the reconciler's retention deletes old schedule events
(TRUERUN_SCHEDULE_EVENT_RETENTION_DAYS, automations/service/retention.py).

Revision ID: 0011_schedule_event_retention
Revises: 0010_long_tasks
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011_schedule_event_retention"
down_revision: str | None = "0010_long_tasks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_schedule_events_created", "schedule_events", ["created_at_ms"])


def downgrade() -> None:
    op.drop_index("ix_schedule_events_created", table_name="schedule_events")
