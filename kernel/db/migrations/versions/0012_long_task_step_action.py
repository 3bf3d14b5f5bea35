"""long_task_steps.action_spec: what the runtime runs for a step (a declared command, its
probe and receipt parser; JSON read by the runtime only, never a state field).

Revision ID: 0012_long_task_step_action
Revises: 0011_schedule_event_retention
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_long_task_step_action"
down_revision: str | None = "0011_schedule_event_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("long_task_steps") as batch:
        batch.add_column(
            sa.Column("action_spec", sa.Text(), server_default=sa.text("'{}'"), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("long_task_steps") as batch:
        batch.drop_column("action_spec")
