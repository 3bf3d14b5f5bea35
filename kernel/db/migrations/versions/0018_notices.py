"""The notices outbox (docs/long-tasks.md "Notices"): ``long_task_notices`` (one row per
fact, unique by its dedupe key), ``long_task_notice_webhooks`` (an owner's subscriptions;
no secret stored) and ``long_task_notice_deliveries`` (one notice to one webhook, with its
delivery state).

Revision ID: 0018_notices
Revises: 0015_long_task_evidence_reader
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_notices"
down_revision: str | None = "0017_long_task_continuations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "long_task_notices",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=128), nullable=False),
        sa.Column("owner_id", sa.String(length=128), nullable=False),
        sa.Column("handle", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("dedupe_key", sa.String(length=256), nullable=False),
        sa.Column("decision_id", sa.String(length=64), nullable=True),
        sa.Column("task_state", sa.String(length=32), nullable=False),
        sa.Column("task_version", sa.BigInteger(), nullable=False),
        sa.Column("title", sa.String(length=256), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_notices_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_long_task_notices")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_long_task_notices_dedupe_key")),
    )
    op.create_index(
        "ix_long_task_notices_owner_created",
        "long_task_notices",
        ["project_id", "owner_id", "created_at_ms"],
    )
    op.create_table(
        "long_task_notice_webhooks",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=128), nullable=False),
        sa.Column("owner_id", sa.String(length=128), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("generation", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_long_task_notice_webhooks")),
        sa.UniqueConstraint(
            "project_id",
            "owner_id",
            "url",
            name=op.f("uq_long_task_notice_webhooks_project_id_owner_id_url"),
        ),
    )
    op.create_table(
        "long_task_notice_deliveries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("notice_id", sa.String(length=64), nullable=False),
        sa.Column("webhook_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=128), nullable=False),
        sa.Column("owner_id", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("tries", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column(
            "last_error", sa.String(length=512), server_default=sa.text("''"), nullable=False
        ),
        sa.Column("delivered_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["notice_id"],
            ["long_task_notices.id"],
            name=op.f("fk_long_task_notice_deliveries_notice_id_long_task_notices"),
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["long_task_notice_webhooks.id"],
            name=op.f("fk_long_task_notice_deliveries_webhook_id"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_long_task_notice_deliveries")),
        sa.UniqueConstraint(
            "notice_id",
            "webhook_id",
            name=op.f("uq_long_task_notice_deliveries_notice_id_webhook_id"),
        ),
    )
    op.create_index(
        "ix_long_task_notice_deliveries_due",
        "long_task_notice_deliveries",
        ["state", "next_at_ms"],
    )


def downgrade() -> None:
    op.drop_index("ix_long_task_notice_deliveries_due", table_name="long_task_notice_deliveries")
    op.drop_table("long_task_notice_deliveries")
    op.drop_table("long_task_notice_webhooks")
    op.drop_index("ix_long_task_notices_owner_created", table_name="long_task_notices")
    op.drop_table("long_task_notices")
