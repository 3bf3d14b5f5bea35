"""Short handles and the one action contract (issue #14, docs/long-tasks.md "One action
contract and short handles"): ``long_tasks.handle``, numbered per owner from 1 in creation
order and unique per owner (existing tasks numbered so, oldest first), and
``long_task_actions``, the one-time action ids a person's actions were made with.

Revision ID: 0014_long_task_handles_actions
Revises: 0013_long_task_usage
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_long_task_handles_actions"
down_revision: str | None = "0013_long_task_usage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("long_tasks") as batch:
        batch.add_column(sa.Column("handle", sa.Integer(), nullable=True))
    # every existing task its owner's number, oldest first (one statement on both backends)
    op.execute(
        "UPDATE long_tasks SET handle = (SELECT COUNT(*) FROM long_tasks o "
        "WHERE o.owner_id = long_tasks.owner_id AND (o.created_at_ms < long_tasks.created_at_ms "
        "OR (o.created_at_ms = long_tasks.created_at_ms AND o.id <= long_tasks.id)))"
    )
    with op.batch_alter_table("long_tasks") as batch:
        batch.alter_column("handle", existing_type=sa.Integer(), nullable=False)
        batch.create_unique_constraint("uq_long_tasks_owner_handle", ["owner_id", "handle"])
        batch.create_check_constraint(op.f("ck_long_tasks_handle_positive"), "handle >= 1")
    op.create_table(
        "long_task_actions",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("action_id", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("decision_id", sa.String(length=64), nullable=True),
        sa.Column("answer", sa.String(length=256), nullable=True),
        sa.Column("actor_type", sa.String(length=32), nullable=False),
        sa.Column("actor_id", sa.String(length=256), nullable=False),
        sa.Column("task_version", sa.BigInteger(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_actions_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint("task_id", "action_id", name=op.f("pk_long_task_actions")),
    )


def downgrade() -> None:
    op.drop_table("long_task_actions")
    with op.batch_alter_table("long_tasks") as batch:
        batch.drop_constraint(op.f("ck_long_tasks_handle_positive"), type_="check")
        batch.drop_constraint(op.f("uq_long_tasks_owner_handle"), type_="unique")
        batch.drop_column("handle")
