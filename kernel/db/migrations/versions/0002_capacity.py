"""Capacity: agents, fair queueing state, the claim-order index; lookup indexes.

Revision ID: 0002_capacity
Revises: 0001_initial
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_capacity"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_claim_order",
        "runs",
        [
            "owner_id",
            "agent_id",
            sa.text("run_now DESC"),
            sa.text("priority DESC"),
            "queued_at_ms",
            "id",
        ],
        postgresql_where=sa.text("status = 'queued'"),
        sqlite_where=sa.text("status = 'queued'"),
    )
    op.create_index("ix_runs_retry_of", "runs", ["retry_of_run_id"])
    op.create_index("ix_runs_scope_status", "runs", ["execution_scope", "status"])
    op.create_index("ix_request_log_created", "request_log", ["created_at_ms"])
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("workspace_kind", sa.String(16), nullable=False),
        sa.Column("workspace_path", sa.String(1024), nullable=False, server_default=sa.text("''")),
        sa.Column("fairness_weight", sa.Integer(), nullable=False, server_default=sa.text("1")),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", name="pk_agents"),
        sa.CheckConstraint("concurrency >= 1", name=op.f("ck_agents_concurrency_positive")),
        sa.CheckConstraint("fairness_weight >= 1", name=op.f("ck_agents_fairness_weight_positive")),
    )
    op.create_table(
        "fair_lanes",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("lane", sa.String(128), nullable=False),
        sa.Column("vtime", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("owner_id", "lane", name="pk_fair_lanes"),
    )
    op.create_table(
        "fair_clocks",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("clock", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("owner_id", name="pk_fair_clocks"),
    )


def downgrade() -> None:
    op.drop_table("fair_clocks")
    op.drop_table("fair_lanes")
    op.drop_table("agents")
    op.drop_index("ix_request_log_created", table_name="request_log")
    op.drop_index("ix_runs_scope_status", table_name="runs")
    op.drop_index("ix_runs_retry_of", table_name="runs")
    op.drop_index("ix_runs_claim_order", table_name="runs")
