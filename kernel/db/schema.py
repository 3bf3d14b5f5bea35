"""The database schema, one definition for SQLite and PostgreSQL.

Statuses are lowercase strings (seed B §8.4), times are UTC milliseconds in BIGINT columns,
JSON is stored as text so both dialects hold exactly the same bytes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

# The one MetaData and the id type live in kernel/db/meta.py, so that the sibling modules
# holding a domain's tables (kernel/db/longtask_tables.py) register on it without importing
# this module; importing them here puts every table on ``metadata`` (migrations compare it).
from kernel.db import longtask_tables as longtask_tables
from kernel.db.meta import ID as ID
from kernel.db.meta import metadata as metadata


class CurrentTransactionId(FunctionElement[int]):
    """The id of the writing transaction, a run_events column default. On PostgreSQL the
    64-bit xid (epoch included, so it never wraps); SQLite has one writer, orders events by
    ``position`` alone and stores 0."""

    type = BigInteger()
    inherit_cache = True


@compiles(CurrentTransactionId)
def _current_tx_id_default(element: CurrentTransactionId, compiler: Any, **kw: Any) -> str:
    return "0"


@compiles(CurrentTransactionId, "postgresql")
def _current_tx_id_postgres(element: CurrentTransactionId, compiler: Any, **kw: Any) -> str:
    return "(pg_current_xact_id()::text::bigint)"


runs = Table(
    "runs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("project_id", String(128), nullable=False),
    Column("owner_id", String(128), nullable=False),
    Column("task_id", String(256), nullable=False),
    Column("task_revision", BigInteger, nullable=False, server_default=text("0")),
    Column("agent_id", String(128)),
    Column("execution_scope", String(256)),
    Column("scope_policy", String(32), nullable=False, server_default=text("'queue'")),
    Column("trigger_type", String(64), nullable=False),
    Column("trigger_id", String(256)),
    Column("idempotency_key", String(256)),
    Column("retry_of_run_id", ID, ForeignKey("runs.id")),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False, server_default=text("1")),
    Column("idempotent", Boolean, nullable=False, server_default=text("false")),
    Column("run_now", Boolean, nullable=False, server_default=text("false")),
    Column("pinned_runtime_instance_id", String(128)),
    Column("required_labels", Text, nullable=False, server_default=text("'[]'")),
    Column("spec", Text, nullable=False, server_default=text("'{}'")),
    Column("status", String(32), nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("event_sequence", BigInteger, nullable=False),
    Column("current_attempt_id", ID),
    Column("attempt_count", Integer, nullable=False, server_default=text("0")),
    Column("created_by", String(128), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("queued_at_ms", BigInteger),
    Column("started_at_ms", BigInteger),
    Column("finished_at_ms", BigInteger),
    Column("cancel_requested_at_ms", BigInteger),
    Column("cancel_reason", String(512)),
    Column("error_code", String(64)),
    Column("error_summary", String(2048)),
    # reconciler recoveries since creation or the last operator requeue (dead_letter past N)
    Column("recovery_count", Integer, nullable=False, server_default=text("0")),
    # sha256 hex of the keyed create that made the run (docs/state-model.md 6a; NULL: no key)
    Column("request_fingerprint", String(64)),
    # the approval required and its grants as JSON (NULL: none; also rows in run_approvals)
    Column("approval", Text),
    CheckConstraint("version >= 0", name="version_nonnegative"),
    CheckConstraint("event_sequence >= 0", name="event_sequence_nonnegative"),
    # Every index here is one a statement's plan uses (docs/indexes.md): each costs an entry
    # on every insert and every non-HOT update, so one no plan uses is pure write cost.
    Index("ix_runs_project_created", "project_id", "created_at_ms"),
    Index("ix_runs_task_created", "task_id", "created_at_ms"),
    # Scans by status: the queue per project, due retries, quiet running runs.
    Index("ix_runs_status_queued", "status", "queued_at_ms"),
    Index("ix_runs_owner_created", "owner_id", "created_at_ms"),
    # Partial: only runs with a scope are ever looked up by one (= or IN, never IS NULL).
    Index(
        "ix_runs_scope_status",
        "execution_scope",
        "status",
        postgresql_where=text("execution_scope IS NOT NULL"),
        sqlite_where=text("execution_scope IS NOT NULL"),
    ),
    Index(
        "uq_runs_project_idempotency_key",
        "project_id",
        "idempotency_key",
        unique=True,
        postgresql_where=text("idempotency_key IS NOT NULL"),
        sqlite_where=text("idempotency_key IS NOT NULL"),
    ),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", ID, primary_key=True),
    Column("run_id", ID, ForeignKey("runs.id"), nullable=False),
    Column("attempt_no", Integer, nullable=False),
    Column("previous_attempt_id", ID, ForeignKey("attempts.id")),
    Column("owner_id", String(128), nullable=False),
    Column("agent_id", String(128)),
    Column("execution_scope", String(256)),
    Column("runtime_task_id", String(128), nullable=False),
    Column("status", String(32), nullable=False),
    Column("observed_state", String(32), nullable=False),
    Column("observed_at_ms", BigInteger),
    Column("sync_state", String(32), nullable=False),
    Column("claimed_at_ms", BigInteger),
    Column("start_requested_at_ms", BigInteger),
    Column("runtime_instance_id", String(128)),
    Column("runtime_device_id", String(128)),
    Column("last_event_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("cancel_requested_at_ms", BigInteger),
    Column("termination_reason", String(256)),
    Column("lease_token", String(64)),
    Column("lease_expires_at_ms", BigInteger),
    Column("heartbeat_at_ms", BigInteger),
    Column("callback_token_hash", String(128)),
    Column("callback_token_expires_at_ms", BigInteger),
    Column("exit_code", Integer),
    Column("error_code", String(64)),
    Column("error_summary", String(2048)),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("started_at_ms", BigInteger),
    Column("finished_at_ms", BigInteger),
    # Why sync went stale, for a person (set with sync_state stale, cleared by evidence).
    Column("sync_reason", String(512)),
    # The attempt's output (coordinator/domain/output.py; the text is in attempt_output):
    # bytes stored, bytes of the runtime's log received, the redacted line still being
    # written and what its continuation may belong to, whether the cap was reached, and
    # when the event log last got a progress note.
    Column("output_stored_bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("output_log_bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("output_held", Text),
    Column("output_hold", String(32)),
    Column("output_truncated", Boolean, nullable=False, server_default=text("false")),
    Column("output_noted_at_ms", BigInteger),
    UniqueConstraint("run_id", "attempt_no", name="uq_attempts_run_attempt_no"),
    CheckConstraint("attempt_no >= 1", name="attempt_no_positive"),
    CheckConstraint("last_event_seq >= 0", name="last_event_seq_nonnegative"),
    Index("ix_attempts_status_lease", "status", "lease_expires_at_ms"),
    # The capacity domain: live attempts of one owner on one runtime instance (seed A §3).
    Index("ix_attempts_runtime_capacity", "owner_id", "runtime_instance_id", "status"),
    # Partial, as on runs: read only by an agent or a scope, never for their absence.
    Index(
        "ix_attempts_agent_status",
        "agent_id",
        "status",
        postgresql_where=text("agent_id IS NOT NULL"),
        sqlite_where=text("agent_id IS NOT NULL"),
    ),
    Index(
        "ix_attempts_scope_status",
        "execution_scope",
        "status",
        postgresql_where=text("execution_scope IS NOT NULL"),
        sqlite_where=text("execution_scope IS NOT NULL"),
    ),
)

run_events = Table(
    "run_events",
    metadata,
    # Keyed by run and sequence, what every read goes by; id is the event's public id, which
    # nothing looks up (an index on it would cost an entry per event for no plan).
    Column("id", ID, nullable=False),
    Column("run_id", ID, ForeignKey("runs.id"), primary_key=True),
    Column("sequence", BigInteger, primary_key=True),
    Column("type", String(64), nullable=False),
    Column("dedupe_key", String(256)),
    Column("actor_type", String(32), nullable=False),
    Column("actor_id", String(128), nullable=False, server_default=text("''")),
    Column("attempt_id", ID),
    Column("payload", Text, nullable=False, server_default=text("'{}'")),
    Column("created_at_ms", BigInteger, nullable=False),
    # The project cursor (docs/events.md): the run's project, copied so a project's stream is
    # one index range; the writing transaction's id (PostgreSQL; 0 on SQLite, whose single
    # writer already commits in insert order); a per-insert counter ordering events within it.
    Column("project_id", String(128), nullable=False),
    Column("tx_id", BigInteger, nullable=False, server_default=CurrentTransactionId()),
    Column("position", BigInteger, Identity(), nullable=False),
    CheckConstraint("sequence >= 1", name="sequence_positive"),
    Index(
        "uq_run_events_run_dedupe_key",
        "run_id",
        "dedupe_key",
        unique=True,
        postgresql_where=text("dedupe_key IS NOT NULL"),
        sqlite_where=text("dedupe_key IS NOT NULL"),
    ),
    Index("ix_run_events_tx_id_position", "tx_id", "position"),
    Index("ix_run_events_project_id_tx_id_position", "project_id", "tx_id", "position"),
)

# The order claims take within one owner's queue: per agent lane, run-now first, then
# priority, then age (capacity.domain.planner). Partial on queued runs so it stays small.
Index(
    "ix_runs_claim_order",
    runs.c.owner_id,
    runs.c.agent_id,
    runs.c.run_now.desc(),
    runs.c.priority.desc(),
    runs.c.queued_at_ms,
    runs.c.id,
    postgresql_where=text("status = 'queued'"),
    sqlite_where=text("status = 'queued'"),
)

# An attempt's output, append-only and offset-addressed (seed B §21 item 13): written only by
# the transition that takes the OUTPUT event (in its transaction), read by ReadRunOutput,
# deleted after the retention period. The event log keeps only progress notes.
attempt_output = Table(
    "attempt_output",
    metadata,
    Column("attempt_id", ID, ForeignKey("attempts.id"), primary_key=True),
    Column("byte_offset", BigInteger, primary_key=True),  # UTF-8 bytes stored before it
    Column("kind", String(16), nullable=False),  # text | skipped | truncated
    Column("text", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    CheckConstraint("byte_offset >= 0", name="byte_offset_nonnegative"),
)

# One row per approver's grant of a run (docs/state-model.md "Approvals"), written in the
# transaction that adds it to the run's approval: the primary key makes a grant count once,
# however two approvals of one person race.
run_approvals = Table(
    "run_approvals",
    metadata,
    Column("run_id", ID, ForeignKey("runs.id"), primary_key=True),
    Column("approver", String(128), primary_key=True),
    # the approver's groups the policy counted, as JSON (a list of names)
    Column("approver_groups", Text, nullable=False, server_default=text("'[]'")),
    Column("granted_at_ms", BigInteger, nullable=False),
)

# Capacity: per-agent concurrency R, workspace and fairness weight (ConfigureAgent).
agents = Table(
    "agents",
    metadata,
    Column("agent_id", String(128), primary_key=True),
    Column("concurrency", Integer, nullable=False),
    Column("workspace_kind", String(16), nullable=False),
    Column("workspace_path", String(1024), nullable=False, server_default=text("''")),
    Column("fairness_weight", Integer, nullable=False, server_default=text("1")),
    Column("updated_at_ms", BigInteger, nullable=False),
    CheckConstraint("concurrency >= 1", name="concurrency_positive"),
    CheckConstraint("fairness_weight >= 1", name="fairness_weight_positive"),
)

# Start-time fair queueing state per owner: each agent lane's virtual time and the owner's
# virtual clock, in millionths of a turn (integers, so both dialects agree exactly).
fair_lanes = Table(
    "fair_lanes",
    metadata,
    Column("owner_id", String(128), primary_key=True),
    Column("lane", String(128), primary_key=True),  # the agent id; '' for runs without one
    Column("vtime", BigInteger, nullable=False),
)
fair_clocks = Table(
    "fair_clocks",
    metadata,
    Column("owner_id", String(128), primary_key=True),
    Column("clock", BigInteger, nullable=False),
)

# Runtime instances that named a lineage in Hello (docs/runtime-protocol.md "Lineage"): a
# new instance of an owner's lineage replaces the earlier ones, whose started attempts are
# then provably gone.
runtime_instances = Table(
    "runtime_instances",
    metadata,
    Column("owner_id", String(128), primary_key=True),
    Column("runtime_instance_id", String(128), primary_key=True),
    Column("lineage", String(128), nullable=False),
    Column("first_hello_at_ms", BigInteger, nullable=False),
    Column("last_hello_at_ms", BigInteger, nullable=False),
    Column("replaced_at_ms", BigInteger, nullable=True),
    Index("ix_runtime_instances_lineage", "owner_id", "lineage"),
)

# Which owner a runtime instance id belongs to: the owner of the first Hello that named it.
# A Hello naming an instance bound to another owner is refused, so a runtime can never take
# over another owner's stream, commands or evidence (seed B §17).
runtime_bindings = Table(
    "runtime_bindings",
    metadata,
    Column("runtime_instance_id", String(128), primary_key=True),
    Column("owner_id", String(128), nullable=False),
    Column("bound_at_ms", BigInteger, nullable=False),
)

# AIP-155: a mutating request's record, kept so that a repeated request_id gets the
# original answer and a reused one with another payload is refused. ``response`` holds a JSON
# snapshot of what the request committed (coordinator/store/snapshots.py), which the API
# renders the answer from; rows written before snapshots hold the answer's bytes.
request_log = Table(
    "request_log",
    metadata,
    Column("request_id", String(128), primary_key=True),
    Column("method", String(64), nullable=False),
    Column("payload_hash", String(64), nullable=False),
    Column("response", LargeBinary, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("ix_request_log_created", "created_at_ms"),
)

# Schedules and triggers (docs/automations.md): a run template plus when it fires. Written
# only by automations/store/, in the same transaction as the runs a fire creates. ``wake_ms``
# is when a scheduler replica next has something to do (the next due fire, or a recheck of
# buffered fires); the claim takes due rows with FOR UPDATE SKIP LOCKED (PostgreSQL) or under
# SQLite's single writer, and every write compares ``version`` (the etag).
schedules = Table(
    "schedules",
    metadata,
    Column("project_id", String(128), primary_key=True),
    Column("schedule_id", String(128), primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("display_name", String(256), nullable=False, server_default=text("''")),
    Column("template", Text, nullable=False),  # JSON: owner, task, agent, priority, labels, spec
    Column("timing", String(16), nullable=False),  # cron | interval | once | none (triggers only)
    Column("cron", String(256), nullable=True),
    Column("every_ms", BigInteger, nullable=True),
    Column("offset_ms", BigInteger, nullable=True),
    Column("at_ms", BigInteger, nullable=True),
    Column("time_zone", String(64), nullable=False),
    Column("start_ms", BigInteger, nullable=True),
    Column("end_ms", BigInteger, nullable=True),
    Column("jitter_ms", BigInteger, nullable=False, server_default=text("0")),
    Column("overlap", String(32), nullable=False),
    Column("catchup_window_ms", BigInteger, nullable=False),
    Column("catchup", String(16), nullable=False),  # one | all
    Column("webhook_generation", Integer, nullable=False, server_default=text("0")),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("pause_note", String(512), nullable=False, server_default=text("''")),
    Column("next_fire_ms", BigInteger, nullable=True),  # nominal; NULL = no more fires
    Column("wake_ms", BigInteger, nullable=True),
    Column("buffered", Text, nullable=False, server_default=text("'[]'")),  # JSON fires waiting
    Column("open_runs", Text, nullable=False, server_default=text("'[]'")),  # JSON run ids
    Column("last_fire_ms", BigInteger, nullable=True),
    Column("last_run_id", ID, nullable=True),
    Column("last_outcome", String(512), nullable=False, server_default=text("''")),
    Column("missed_total", BigInteger, nullable=False, server_default=text("0")),
    Column("created_by", String(256), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Index("ix_schedules_wake", "wake_ms"),
)

# What each schedule did, one row per decision, for people: fired (with its run), skipped,
# buffered, cancelled the previous run, coalesced, missed, paused, resumed, updated.
schedule_events = Table(
    "schedule_events",
    metadata,
    Column("project_id", String(128), primary_key=True),
    Column("schedule_id", String(128), primary_key=True),
    Column("sequence", BigInteger, primary_key=True),
    Column("type", String(64), nullable=False),
    Column("fire_ms", BigInteger, nullable=True),
    Column("run_id", ID, nullable=True),
    Column("message", String(1024), nullable=False),
    Column("actor_type", String(32), nullable=False),
    Column("actor_id", String(256), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("ix_schedule_events_created", "created_at_ms"),
)
