"""Initial schema: runs, attempts, run_events, request_log.

Written by hand to reproduce kernel/db/schema.py exactly, constraint names included
(they follow schema.metadata's naming convention). tests/integration/test_migrations.py
compares the migrated database with schema.metadata on SQLite and PostgreSQL.

Revision ID: 0001_initial
Revises:
Create Date: 2025-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(64)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", ID, nullable=False),
        sa.Column("project_id", sa.String(128), nullable=False),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("task_id", sa.String(256), nullable=False),
        sa.Column("task_revision", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("agent_id", sa.String(128), nullable=True),
        sa.Column("execution_scope", sa.String(256), nullable=True),
        sa.Column("scope_policy", sa.String(32), nullable=False, server_default=sa.text("'queue'")),
        sa.Column("trigger_type", sa.String(64), nullable=False),
        sa.Column("trigger_id", sa.String(256), nullable=True),
        sa.Column("idempotency_key", sa.String(256), nullable=True),
        sa.Column("retry_of_run_id", ID, nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer(), nullable=False, server_default=sa.text("1")),
        sa.Column("idempotent", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("run_now", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("pinned_runtime_instance_id", sa.String(128), nullable=True),
        sa.Column("required_labels", sa.Text(), nullable=False, server_default=sa.text("'[]'")),
        sa.Column("spec", sa.Text(), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("event_sequence", sa.BigInteger(), nullable=False),
        sa.Column("current_attempt_id", ID, nullable=True),
        sa.Column("attempt_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("queued_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("cancel_requested_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("cancel_reason", sa.String(512), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("error_summary", sa.String(2048), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.ForeignKeyConstraint(
            ["retry_of_run_id"], ["runs.id"], name=op.f("fk_runs_retry_of_run_id_runs")
        ),
        sa.CheckConstraint("version >= 0", name=op.f("ck_runs_version_nonnegative")),
        sa.CheckConstraint("event_sequence >= 0", name=op.f("ck_runs_event_sequence_nonnegative")),
    )
    op.create_index("ix_runs_project_created", "runs", ["project_id", "created_at_ms"])
    op.create_index("ix_runs_task_created", "runs", ["task_id", "created_at_ms"])
    op.create_index("ix_runs_status_queued", "runs", ["status", "queued_at_ms"])
    op.create_index("ix_runs_status_cancel_requested", "runs", ["status", "cancel_requested_at_ms"])
    op.create_index("ix_runs_owner_created", "runs", ["owner_id", "created_at_ms"])
    op.create_index(
        "uq_runs_project_idempotency_key",
        "runs",
        ["project_id", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
    )

    op.create_table(
        "attempts",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("attempt_no", sa.Integer(), nullable=False),
        sa.Column("previous_attempt_id", ID, nullable=True),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=True),
        sa.Column("execution_scope", sa.String(256), nullable=True),
        sa.Column("runtime_task_id", sa.String(128), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("observed_state", sa.String(32), nullable=False),
        sa.Column("observed_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("sync_state", sa.String(32), nullable=False),
        sa.Column("claimed_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("start_requested_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("runtime_instance_id", sa.String(128), nullable=True),
        sa.Column("runtime_device_id", sa.String(128), nullable=True),
        sa.Column("last_event_seq", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("cancel_requested_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("termination_reason", sa.String(256), nullable=True),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("lease_expires_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("heartbeat_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("callback_token_hash", sa.String(128), nullable=True),
        sa.Column("callback_token_expires_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("error_summary", sa.String(2048), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_attempts_run_id_runs")),
        sa.ForeignKeyConstraint(
            ["previous_attempt_id"],
            ["attempts.id"],
            name=op.f("fk_attempts_previous_attempt_id_attempts"),
        ),
        sa.UniqueConstraint("run_id", "attempt_no", name=op.f("uq_attempts_run_attempt_no")),
        sa.CheckConstraint("attempt_no >= 1", name=op.f("ck_attempts_attempt_no_positive")),
        sa.CheckConstraint(
            "last_event_seq >= 0", name=op.f("ck_attempts_last_event_seq_nonnegative")
        ),
    )
    op.create_index("ix_attempts_status_created", "attempts", ["status", "created_at_ms"])
    op.create_index("ix_attempts_status_lease", "attempts", ["status", "lease_expires_at_ms"])
    op.create_index(
        "ix_attempts_runtime_capacity",
        "attempts",
        ["owner_id", "runtime_instance_id", "status"],
    )
    op.create_index("ix_attempts_agent_status", "attempts", ["agent_id", "status"])
    op.create_index("ix_attempts_scope_status", "attempts", ["execution_scope", "status"])

    op.create_table(
        "run_events",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("dedupe_key", sa.String(256), nullable=True),
        sa.Column("actor_type", sa.String(32), nullable=False),
        sa.Column("actor_id", sa.String(128), nullable=False, server_default=sa.text("''")),
        sa.Column("attempt_id", ID, nullable=True),
        sa.Column("payload", sa.Text(), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_events")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_events_run_id_runs")),
        sa.UniqueConstraint("run_id", "sequence", name=op.f("uq_run_events_run_sequence")),
        sa.CheckConstraint("sequence >= 1", name=op.f("ck_run_events_sequence_positive")),
    )
    op.create_index(
        "uq_run_events_run_dedupe_key",
        "run_events",
        ["run_id", "dedupe_key"],
        unique=True,
        postgresql_where=sa.text("dedupe_key IS NOT NULL"),
        sqlite_where=sa.text("dedupe_key IS NOT NULL"),
    )
    op.create_index("ix_run_events_created", "run_events", ["created_at_ms"])

    op.create_table(
        "request_log",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("payload_hash", sa.String(64), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_request_log")),
    )


def downgrade() -> None:
    # Dropping a table drops its indexes and constraints; children before parents.
    op.drop_table("request_log")
    op.drop_table("run_events")
    op.drop_table("attempts")
    op.drop_table("runs")
