"""runtime_bindings: a runtime instance id belongs to the owner of the first Hello that named
it; a Hello of another owner naming it is refused (docs/runtime-protocol.md "Trust").

Revision ID: 0007_runtime_bindings
Revises: 0006_attempt_sync_reason
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_runtime_bindings"
down_revision: str | None = "0006_attempt_sync_reason"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtime_bindings",
        sa.Column("runtime_instance_id", sa.String(128), nullable=False),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("bound_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("runtime_instance_id", name="pk_runtime_bindings"),
    )


def downgrade() -> None:
    op.drop_table("runtime_bindings")
