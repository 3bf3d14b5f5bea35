"""attempt_output: an attempt's output in its own append-only, offset-addressed table, and
the attempts columns that track it; the event log keeps only progress notes (issue #11 §5,
coordinator/domain/output.py).

Revision ID: 0008_attempt_output
Revises: 0007_runtime_bindings
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_attempt_output"
down_revision: str | None = "0007_runtime_bindings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(
            sa.Column("output_stored_bytes", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("output_log_bytes", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("output_held", sa.Text(), nullable=True))
        batch.add_column(sa.Column("output_hold", sa.String(32), nullable=True))
        batch.add_column(
            sa.Column(
                "output_truncated",
                sa.Boolean(),
                nullable=False,
                server_default=sa.text("false"),
            )
        )
        batch.add_column(sa.Column("output_noted_at_ms", sa.BigInteger(), nullable=True))
    op.create_table(
        "attempt_output",
        sa.Column("attempt_id", sa.String(64), nullable=False),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "byte_offset >= 0", name=op.f("ck_attempt_output_byte_offset_nonnegative")
        ),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.id"], name="fk_attempt_output_attempt_id_attempts"
        ),
        sa.PrimaryKeyConstraint("attempt_id", "byte_offset", name="pk_attempt_output"),
    )


def downgrade() -> None:
    op.drop_table("attempt_output")
    with op.batch_alter_table("attempts") as batch:
        for column in (
            "output_noted_at_ms",
            "output_truncated",
            "output_hold",
            "output_held",
            "output_log_bytes",
            "output_stored_bytes",
        ):
            batch.drop_column(column)
