"""Runtime lineage: runtime_instances remembers which instance of an owner's lineage said
Hello, so a new instance of the lineage proves the earlier ones gone (docs/runtime-protocol.md
"Lineage").

Revision ID: 0005_runtime_lineage
Revises: 0004_reconciler
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_runtime_lineage"
down_revision: str | None = "0004_reconciler"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtime_instances",
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("runtime_instance_id", sa.String(128), nullable=False),
        sa.Column("lineage", sa.String(128), nullable=False),
        sa.Column("first_hello_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_hello_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("replaced_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("owner_id", "runtime_instance_id", name="pk_runtime_instances"),
    )
    op.create_index("ix_runtime_instances_lineage", "runtime_instances", ["owner_id", "lineage"])


def downgrade() -> None:
    op.drop_index("ix_runtime_instances_lineage", table_name="runtime_instances")
    op.drop_table("runtime_instances")
