"""Activation and lazy promotion (docs/long-tasks.md "Activation and promotion"):
``run_preflights``, one row per ordinary run and side-effect tier that was put to a
preflight, with the classifier's verdict once the runtime reported it.

Revision ID: 0016_run_preflight
Revises: 0015_long_task_evidence_reader
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_run_preflight"
down_revision: str | None = "0015_long_task_evidence_reader"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_preflights",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("tier", sa.String(32), primary_key=True),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.Column("path", sa.String(16), nullable=True),
        sa.Column("reason", sa.String(1024), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("requested_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("decided_at_ms", sa.BigInteger(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("run_preflights")
