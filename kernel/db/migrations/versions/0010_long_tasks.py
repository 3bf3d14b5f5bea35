"""The long-task tables (issue #13, docs/long-tasks.md "Store and door"): long_tasks and
their plan versions, steps, acceptance criteria, side effects (intent + receipt), evidence
references, decisions and approvals, attempts (each linked to its run) and the append-only
event log. State-machine fields are columns; JSON only for display payloads.

Revision ID: 0010_long_tasks
Revises: 0009_schedules
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_long_tasks"
down_revision: str | None = "0009_schedules"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "long_tasks",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=128), nullable=False),
        sa.Column("owner_id", sa.String(length=128), nullable=False),
        sa.Column("agent_id", sa.String(length=128), nullable=True),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("constraints", sa.Text(), server_default=sa.text("'[]'"), nullable=False),
        sa.Column("sources", sa.Text(), server_default=sa.text("'[]'"), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("state_version", sa.BigInteger(), nullable=False),
        sa.Column("plan_version", sa.Integer(), nullable=False),
        sa.Column(
            "state_reason", sa.String(length=1024), server_default=sa.text("''"), nullable=False
        ),
        sa.Column("lease_attempt_id", sa.String(length=64), nullable=True),
        sa.Column("lease_run_id", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("attempts_used", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("tokens_used", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_tokens", sa.BigInteger(), nullable=True),
        sa.Column("deadline_ms", sa.BigInteger(), nullable=True),
        sa.Column(
            "verify_interruptions", sa.Integer(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column("max_verify_interruptions", sa.Integer(), nullable=False),
        sa.Column("corrections_used", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_corrections", sa.Integer(), nullable=False),
        sa.Column("event_sequence", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("plan_version >= 1", name=op.f("ck_long_tasks_plan_version_positive")),
        sa.CheckConstraint("state_version >= 1", name=op.f("ck_long_tasks_state_version_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_long_tasks")),
    )
    op.create_index("ix_long_tasks_owner_state", "long_tasks", ["owner_id", "state"], unique=False)
    op.create_index(
        "ix_long_tasks_project_created", "long_tasks", ["project_id", "created_at_ms"], unique=False
    )
    op.create_table(
        "long_task_attempts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("attempt_no", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("plan_version", sa.Integer(), nullable=False),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("ended_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.String(length=1024), server_default=sa.text("''"), nullable=False),
        sa.CheckConstraint(
            "attempt_no >= 1", name=op.f("ck_long_task_attempts_attempt_no_positive")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_long_task_attempts_run_id_runs")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_attempts_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_long_task_attempts")),
        sa.UniqueConstraint("run_id", name="uq_long_task_attempts_run_id"),
        sa.UniqueConstraint("task_id", "attempt_no", name="uq_long_task_attempts_task_attempt_no"),
    )
    op.create_table(
        "long_task_criteria",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("plan_version", sa.Integer(), nullable=False),
        sa.Column("criterion_id", sa.String(length=128), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("required", sa.Boolean(), nullable=False),
        sa.Column("subjective", sa.Boolean(), nullable=False),
        sa.Column("checker_kind", sa.String(length=64), nullable=True),
        sa.Column("checker_spec", sa.Text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("author", sa.String(length=16), nullable=False),
        sa.Column("user_edited", sa.Boolean(), nullable=False),
        sa.Column("written_in", sa.Integer(), nullable=False),
        sa.Column(
            "result", sa.String(length=16), server_default=sa.text("'unproven'"), nullable=False
        ),
        sa.Column("result_source", sa.String(length=16), nullable=True),
        sa.Column("result_at_ms", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "user_edited = (author = 'user')",
            name=op.f("ck_long_task_criteria_user_edited_is_user_author"),
        ),
        sa.CheckConstraint(
            "subjective = (checker_kind IS NULL)",
            name=op.f("ck_long_task_criteria_subjective_has_no_checker"),
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_criteria_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint(
            "task_id", "plan_version", "criterion_id", name=op.f("pk_long_task_criteria")
        ),
    )
    op.create_table(
        "long_task_decisions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("options", sa.Text(), server_default=sa.text("'[]'"), nullable=False),
        sa.Column("material", sa.Text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("subject", sa.String(length=512), server_default=sa.text("''"), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=True),
        sa.Column("attempt_id", sa.String(length=64), nullable=True),
        sa.Column("plan_version", sa.Integer(), nullable=False),
        sa.Column("task_version", sa.BigInteger(), nullable=False),
        sa.Column("repeat_count", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("answer", sa.String(length=256), nullable=True),
        sa.Column("note", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("answered_by", sa.String(length=256), nullable=True),
        sa.Column("answered_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_decisions_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_long_task_decisions")),
    )
    op.create_index(
        "ix_long_task_decisions_task_id_state",
        "long_task_decisions",
        ["task_id", "state"],
        unique=False,
    )
    op.create_table(
        "long_task_events",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("plan_version", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=True),
        sa.Column("attempt_id", sa.String(length=64), nullable=True),
        sa.Column("decision_id", sa.String(length=64), nullable=True),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=True),
        sa.Column("actor_type", sa.String(length=32), nullable=False),
        sa.Column("actor_id", sa.String(length=256), nullable=False),
        sa.Column("message", sa.String(length=1024), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("sequence >= 1", name=op.f("ck_long_task_events_sequence_positive")),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_events_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint("task_id", "sequence", name=op.f("pk_long_task_events")),
    )
    op.create_table(
        "long_task_evidence",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=True),
        sa.Column("criterion_id", sa.String(length=128), nullable=True),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("reference", sa.String(length=2048), nullable=False),
        sa.Column("summary", sa.String(length=2048), nullable=False),
        sa.Column("render", sa.Text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("effect_id", sa.String(length=64), nullable=True),
        sa.Column("attempt_id", sa.String(length=64), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "(step_id IS NULL AND criterion_id IS NOT NULL)"
            " OR (step_id IS NOT NULL AND criterion_id IS NULL)",
            name=op.f("ck_long_task_evidence_bound_to_one"),
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_evidence_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_long_task_evidence")),
    )
    op.create_index(
        "ix_long_task_evidence_task_id", "long_task_evidence", ["task_id"], unique=False
    )
    op.create_table(
        "long_task_plan_versions",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("author", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=2048), server_default=sa.text("''"), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("closed_state", sa.String(length=32), nullable=True),
        sa.Column("closed_at_ms", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["long_tasks.id"],
            name=op.f("fk_long_task_plan_versions_task_id_long_tasks"),
        ),
        sa.PrimaryKeyConstraint("task_id", "version", name=op.f("pk_long_task_plan_versions")),
    )
    op.create_table(
        "long_task_side_effects",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=False),
        sa.Column("plan_version", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.String(length=64), nullable=False),
        sa.Column("try_no", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(length=1024), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=256), nullable=True),
        sa.Column("intent_recorded_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("external_id", sa.String(length=512), nullable=True),
        sa.Column("receipt_target", sa.String(length=1024), nullable=True),
        sa.Column("receipt_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("receipt_summary", sa.Text(), nullable=True),
        sa.Column("receipt_detail", sa.Text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("receipt_recorded_at_ms", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["long_tasks.id"],
            name=op.f("fk_long_task_side_effects_task_id_long_tasks"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_long_task_side_effects")),
    )
    op.create_index(
        "ix_long_task_side_effects_task_id_step_id",
        "long_task_side_effects",
        ["task_id", "step_id"],
        unique=False,
    )
    op.create_table(
        "long_task_steps",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("plan_version", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.String(length=128), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=512), nullable=False),
        sa.Column("side_effect", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("attempt_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("holder_attempt_id", sa.String(length=64), nullable=True),
        sa.Column("intent_id", sa.String(length=64), nullable=True),
        sa.Column("receipt_id", sa.String(length=64), nullable=True),
        sa.Column(
            "probe", sa.String(length=16), server_default=sa.text("'not_probed'"), nullable=False
        ),
        sa.Column("basis", sa.String(length=32), nullable=True),
        sa.Column("granted_by", sa.String(length=64), nullable=True),
        sa.Column("idempotency_key", sa.String(length=256), nullable=True),
        sa.Column("probe_spec", sa.Text(), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("input_summary", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("introduced_in", sa.Integer(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("position >= 1", name=op.f("ck_long_task_steps_position_positive")),
        sa.CheckConstraint("version >= 1", name=op.f("ck_long_task_steps_version_positive")),
        sa.ForeignKeyConstraint(
            ["task_id"], ["long_tasks.id"], name=op.f("fk_long_task_steps_task_id_long_tasks")
        ),
        sa.PrimaryKeyConstraint(
            "task_id", "plan_version", "step_id", name=op.f("pk_long_task_steps")
        ),
        sa.UniqueConstraint(
            "task_id", "plan_version", "position", name="uq_long_task_steps_position"
        ),
    )
    op.create_index("ix_long_task_steps_state", "long_task_steps", ["state"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_long_task_steps_state", table_name="long_task_steps")
    op.drop_table("long_task_steps")
    op.drop_index("ix_long_task_side_effects_task_id_step_id", table_name="long_task_side_effects")
    op.drop_table("long_task_side_effects")
    op.drop_table("long_task_plan_versions")
    op.drop_index("ix_long_task_evidence_task_id", table_name="long_task_evidence")
    op.drop_table("long_task_evidence")
    op.drop_table("long_task_events")
    op.drop_index("ix_long_task_decisions_task_id_state", table_name="long_task_decisions")
    op.drop_table("long_task_decisions")
    op.drop_table("long_task_criteria")
    op.drop_table("long_task_attempts")
    op.drop_index("ix_long_tasks_project_created", table_name="long_tasks")
    op.drop_index("ix_long_tasks_owner_state", table_name="long_tasks")
    op.drop_table("long_tasks")
