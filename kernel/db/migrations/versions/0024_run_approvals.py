"""A run keeps its approval: what it requires and who gave it (issue #36).

A retry of a ``requires_approval`` run was queued at once, since the run row did not keep
that it had required approval, and no read said who approved it. ``runs.approval`` now holds
the approval as JSON (the policy: how many distinct approvers, from which groups, whether the
creator may be one, the expiry; and the grants so far: coordinator/domain/approvals.py), and
``run_approvals`` holds one row per grant, its primary key (run_id, approver) making a grant
count once however two approvals race (docs/state-model.md "Approvals").

Runs from before keep what can be known: a run pending approval requires one approver (all a
run could require then); a run with a ``run.approved`` event required one and got it from
that event's actor, at its time (the grant's row too), so a retry of it asks again. Finding
those events reads ``run_events`` once, whole (no index is on the event type). The column is
nullable with no default (a catalog change on PostgreSQL) and appended, so the runs row type
keeps RUN_COLUMNS' order (postgres/creates.py).

Revision ID: 0024_run_approvals
Revises: 0023_run_request_fingerprint
Create Date: 2026-12-07
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0024_run_approvals"
down_revision: str | None = "0023_run_request_fingerprint"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _approval(grants: list[dict[str, Any]]) -> str:
    """One approver, anyone, no expiry (coordinator/domain/approvals.py's stored form)."""
    document = {
        "required": 1,
        "groups": [],
        "refuse_self": False,
        "expire_after_ms": 0,
        "expires_at_ms": None,
        "grants": grants,
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


def upgrade() -> None:
    op.add_column("runs", sa.Column("approval", sa.Text()))
    op.create_table(
        "run_approvals",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("approver", sa.String(128), nullable=False),
        sa.Column("approver_groups", sa.Text(), nullable=False, server_default=sa.text("'[]'")),
        sa.Column("granted_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_run_approvals_run_id_runs"),
        sa.PrimaryKeyConstraint("run_id", "approver", name="pk_run_approvals"),
    )
    bind = op.get_bind()
    approved = bind.execute(
        sa.text(
            "SELECT run_id, actor_id, created_at_ms FROM run_events WHERE type = 'run.approved'"
        )
    ).all()
    grants: dict[str, dict[str, Any]] = {
        run_id: {"approver": actor or "unknown", "groups": [], "at_ms": int(at_ms)}
        for run_id, actor, at_ms in approved
    }
    pending = bind.execute(
        sa.text("SELECT id FROM runs WHERE status = 'pending_approval'")
    ).scalars()
    values = [{"id": run_id, "approval": _approval([])} for run_id in pending]
    values += [{"id": run_id, "approval": _approval([g])} for run_id, g in grants.items()]
    if values:
        bind.execute(sa.text("UPDATE runs SET approval = :approval WHERE id = :id"), values)
    if grants:
        bind.execute(
            sa.text(
                "INSERT INTO run_approvals (run_id, approver, approver_groups, granted_at_ms) "
                "VALUES (:run_id, :approver, '[]', :at_ms)"
            ),
            [
                {"run_id": r, "approver": g["approver"], "at_ms": g["at_ms"]}
                for r, g in grants.items()
            ],
        )


def downgrade() -> None:
    op.drop_table("run_approvals")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("approval")
