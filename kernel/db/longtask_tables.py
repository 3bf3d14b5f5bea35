"""The long-task tables (docs/long-tasks.md "Store and door"; seed C "存储形态"), on the one
``metadata`` (kernel/db/meta.py; kernel/db/schema.py imports this module so that every table
is registered). Written only by ``longtasks/store/``, always in a transaction opened through
the coordinator's door by the long-task door (``longtasks/service/door.py``).

Every field the state machine reads, checks or protects is a real column: states, versions,
plan version, positions, side-effect class, idempotency key, lease, budget counters, the
current try's intent / receipt / probe, and times. JSON (text) columns hold display payloads
only (constraints, sources, probe and checker parameters, a receipt's detail, an evidence
render summary, a decision's options and material); no state read parses them.

The seed's names, prefixed so they never meet the run tables': executions -> ``long_tasks``,
plan_versions, steps, acceptance_criteria, side_effects, evidence_refs (``long_task_evidence``),
decisions (decisions and approvals), attempts (each linked to its run), and an append-only
event log.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from kernel.db.meta import ID, metadata


def _task() -> ForeignKey:
    """A child row's link to its task (a ForeignKey object belongs to one column)."""
    return ForeignKey("long_tasks.id")


KEY = String(128)  # a step's or a criterion's id, stable within its task across versions
STATE = String(32)

# One row per long task (the seed's executions): the aggregate's root. Every mutation locks
# it (PostgreSQL FOR UPDATE; SQLite's single writer) and compares ``state_version`` (the
# etag), so a task's rows change one transaction at a time.
long_tasks = Table(
    "long_tasks",
    metadata,
    Column("id", ID, primary_key=True),
    Column("project_id", String(128), nullable=False),
    Column("owner_id", String(128), nullable=False),
    Column("agent_id", String(128), nullable=True),  # the agent each attempt's run goes to
    Column("goal", Text, nullable=False),
    Column("constraints", Text, nullable=False, server_default=text("'[]'")),  # JSON, display
    Column("sources", Text, nullable=False, server_default=text("'[]'")),  # JSON, display
    Column("state", STATE, nullable=False),
    Column("state_version", BigInteger, nullable=False),
    Column("plan_version", Integer, nullable=False),
    Column("state_reason", String(1024), nullable=False, server_default=text("''")),
    # The lease: the attempt (and its run) that may act on steps, until when.
    Column("lease_attempt_id", ID, nullable=True),
    Column("lease_run_id", ID, nullable=True),
    Column("lease_expires_at_ms", BigInteger, nullable=True),
    # Task-level budget (seed "预算、并发与配额") and the verification loop's bounds.
    Column("attempts_used", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("tokens_used", BigInteger, nullable=False, server_default=text("0")),
    Column("max_tokens", BigInteger, nullable=True),
    Column("deadline_ms", BigInteger, nullable=True),  # end of the task's lifetime
    Column("verify_interruptions", Integer, nullable=False, server_default=text("0")),
    Column("max_verify_interruptions", Integer, nullable=False),
    Column("corrections_used", Integer, nullable=False, server_default=text("0")),
    Column("max_corrections", Integer, nullable=False),
    Column("event_sequence", BigInteger, nullable=False),  # the last long_task_events row
    Column("created_by", String(256), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("finished_at_ms", BigInteger, nullable=True),
    # when retention trimmed the finished task's bulky records (0015; None: untrimmed)
    Column("trimmed_at_ms", BigInteger, nullable=True),
    # The owner's short handle (``#3``): numbered per owner from 1 in creation order, never
    # reused, so a handle in an old message can only ever name this task (docs/long-tasks.md
    # "One action contract and short handles").
    Column("handle", Integer, nullable=False),
    # Where the task came from (0019): the run it was promoted from, and the reference its
    # creator gave (a chat thread's URL); notices are shown there too ("Notices").
    Column("source_run_id", ID, nullable=True),
    Column("source_ref", String(2048), nullable=False, server_default=text("''")),
    CheckConstraint("state_version >= 1", name="state_version_positive"),
    CheckConstraint("plan_version >= 1", name="plan_version_positive"),
    Index("ix_long_tasks_owner_state", "owner_id", "state"),
    Index("ix_long_tasks_project_created", "project_id", "created_at_ms"),
    UniqueConstraint("owner_id", "handle", name="uq_long_tasks_owner_handle"),
    CheckConstraint("handle >= 1", name="handle_positive"),
)

# Every plan version of a task; a version that a newer one replaced keeps the task state it
# closed in (for ``continue``: the terminal state, never reopened).
long_task_plan_versions = Table(
    "long_task_plan_versions",
    metadata,
    Column("task_id", ID, _task(), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("author", String(16), nullable=False),  # model | user
    Column("reason", String(2048), nullable=False, server_default=text("''")),
    Column("created_by", String(256), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("closed_state", STATE, nullable=True),
    Column("closed_at_ms", BigInteger, nullable=True),
)

# The steps of each plan version, in order. A step keeps its id across versions; a new
# version copies the steps it keeps (state and current try included), so a completed step's
# evidence, bound to its id, stays with it. ``version`` is the step's own etag.
long_task_steps = Table(
    "long_task_steps",
    metadata,
    Column("task_id", ID, _task(), primary_key=True),
    Column("plan_version", Integer, primary_key=True),
    Column("step_id", KEY, primary_key=True),
    Column("position", Integer, nullable=False),
    Column("title", String(512), nullable=False),
    Column("side_effect", String(32), nullable=False),
    Column("state", STATE, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("attempt_count", Integer, nullable=False, server_default=text("0")),
    Column("holder_attempt_id", ID, nullable=True),
    Column("intent_id", ID, nullable=True),  # the current try's side effect (its intent)
    Column("receipt_id", ID, nullable=True),  # set once that side effect has its receipt
    Column("probe", String(16), nullable=False, server_default=text("'not_probed'")),
    Column("basis", String(32), nullable=True),  # why the last move out of uncertain was safe
    Column("granted_by", ID, nullable=True),  # a person's answer allowing the next retry
    Column("idempotency_key", String(256), nullable=True),
    Column("probe_spec", Text, nullable=False, server_default=text("'{}'")),  # JSON, runtime's
    # JSON, what the runtime runs for the step (a declared command, its receipt parser)
    Column("action_spec", Text, nullable=False, server_default=text("'{}'")),
    Column("input_summary", Text, nullable=False, server_default=text("''")),
    Column("introduced_in", Integer, nullable=False),  # the plan version that first wrote it
    Column("updated_at_ms", BigInteger, nullable=False),
    UniqueConstraint("task_id", "plan_version", "position", name="uq_long_task_steps_position"),
    CheckConstraint("position >= 1", name="position_positive"),
    CheckConstraint("version >= 1", name="version_positive"),
    Index("ix_long_task_steps_state", "state"),
)

# The acceptance criteria of each plan version (seed "任务级完成判定"). ``subjective``: no
# deterministic checker binds it; ``user_edited``: a person wrote or changed it, so no later
# model revision may change or drop it. Both follow from other columns and are checked so.
long_task_criteria = Table(
    "long_task_criteria",
    metadata,
    Column("task_id", ID, _task(), primary_key=True),
    Column("plan_version", Integer, primary_key=True),
    Column("criterion_id", KEY, primary_key=True),
    Column("position", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("required", Boolean, nullable=False),
    Column("subjective", Boolean, nullable=False),
    Column("checker_kind", String(64), nullable=True),
    Column("checker_spec", Text, nullable=False, server_default=text("'{}'")),  # JSON parameters
    Column("author", String(16), nullable=False),  # model | user
    Column("user_edited", Boolean, nullable=False),
    Column("written_in", Integer, nullable=False),  # the plan version that wrote these terms
    Column("result", String(16), nullable=False, server_default=text("'unproven'")),
    Column("result_source", String(16), nullable=True),  # checker | judge | user
    Column("result_at_ms", BigInteger, nullable=True),
    CheckConstraint("subjective = (checker_kind IS NULL)", name="subjective_has_no_checker"),
    CheckConstraint("user_edited = (author = 'user')", name="user_edited_is_user_author"),
)

# One row per try of a side-effecting step: the intent (before the effect) and, once it came
# back, the receipt (after), each with what a person needs to check it themselves.
long_task_side_effects = Table(
    "long_task_side_effects",
    metadata,
    Column("id", ID, primary_key=True),
    Column("task_id", ID, _task(), nullable=False),
    Column("step_id", KEY, nullable=False),
    Column("plan_version", Integer, nullable=False),
    Column("attempt_id", ID, nullable=False),
    Column("try_no", Integer, nullable=False),
    Column("target", String(1024), nullable=False),
    Column("summary", Text, nullable=False),
    Column("idempotency_key", String(256), nullable=True),
    Column("intent_recorded_at_ms", BigInteger, nullable=False),
    Column("external_id", String(512), nullable=True),
    Column("receipt_target", String(1024), nullable=True),
    Column("receipt_at_ms", BigInteger, nullable=True),  # the outside world's timestamp
    Column("receipt_summary", Text, nullable=True),
    Column("receipt_detail", Text, nullable=False, server_default=text("'{}'")),  # JSON, display
    Column("receipt_recorded_at_ms", BigInteger, nullable=True),
    Index("ix_long_task_side_effects_task_id_step_id", "task_id", "step_id"),
)

# Safe references to evidence kept elsewhere, each bound to exactly one step or one
# criterion (it proves nothing else), with a summary that renders without the target.
long_task_evidence = Table(
    "long_task_evidence",
    metadata,
    Column("id", ID, primary_key=True),
    Column("task_id", ID, _task(), nullable=False),
    Column("step_id", KEY, nullable=True),
    Column("criterion_id", KEY, nullable=True),
    Column("kind", String(64), nullable=False),
    Column("reference", String(2048), nullable=False),
    Column("summary", String(2048), nullable=False),
    Column("render", Text, nullable=False, server_default=text("'{}'")),  # JSON, display
    Column("effect_id", ID, nullable=True),  # the side effect whose receipt it cites
    Column("attempt_id", ID, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    # the target is gone (the start-up check or retention said so, 0015); the summary stays
    Column("unavailable_reason", String(512), nullable=True),
    CheckConstraint(
        "(step_id IS NULL AND criterion_id IS NOT NULL)"
        " OR (step_id IS NOT NULL AND criterion_id IS NULL)",
        name="bound_to_one",
    ),
    Index("ix_long_task_evidence_task_id", "task_id"),
)

# Questions for a person: a model's decision, a recovery's question about an effect, the
# verifier's request to confirm, and approvals (scoped to the attempt that asked; the repeat
# counter says how often this exact action was asked for in the task).
long_task_decisions = Table(
    "long_task_decisions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("task_id", ID, _task(), nullable=False),
    Column("kind", String(16), nullable=False),  # question | effect | verification | approval
    Column("state", String(16), nullable=False),  # open | answered | expired
    Column("question", Text, nullable=False),
    Column("options", Text, nullable=False, server_default=text("'[]'")),  # JSON, display
    Column("material", Text, nullable=False, server_default=text("'{}'")),  # JSON, display
    Column("subject", String(512), nullable=False, server_default=text("''")),
    Column("step_id", KEY, nullable=True),
    Column("attempt_id", ID, nullable=True),
    Column("plan_version", Integer, nullable=False),
    Column("task_version", BigInteger, nullable=False),  # the task's etag when it was asked
    Column("repeat_count", Integer, nullable=False, server_default=text("1")),
    Column("answer", String(256), nullable=True),
    Column("note", Text, nullable=False, server_default=text("''")),
    Column("answered_by", String(256), nullable=True),
    Column("answered_at_ms", BigInteger, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("ix_long_task_decisions_task_id_state", "task_id", "state"),
)

# Each attempt of a task is a run of truerun, created in the transaction that starts it.
long_task_attempts = Table(
    "long_task_attempts",
    metadata,
    Column("id", ID, primary_key=True),
    Column("task_id", ID, _task(), nullable=False),
    Column("attempt_no", Integer, nullable=False),
    Column("run_id", ID, ForeignKey("runs.id"), nullable=False),
    Column("plan_version", Integer, nullable=False),
    Column("started_at_ms", BigInteger, nullable=False),
    Column("ended_at_ms", BigInteger, nullable=True),
    Column("outcome", String(32), nullable=True),
    Column("reason", String(1024), nullable=False, server_default=text("''")),
    # what the evidence reader served this attempt, for its cumulative limit (0015)
    Column("evidence_bytes_read", BigInteger, nullable=False, server_default=text("0")),
    UniqueConstraint("task_id", "attempt_no", name="uq_long_task_attempts_task_attempt_no"),
    UniqueConstraint("run_id", name="uq_long_task_attempts_run_id"),
    CheckConstraint("attempt_no >= 1", name="attempt_no_positive"),
)

# What happened to each task, append-only, numbered from the task row's event_sequence in the
# transaction of the change.
long_task_events = Table(
    "long_task_events",
    metadata,
    Column("task_id", ID, _task(), primary_key=True),
    Column("sequence", BigInteger, primary_key=True),
    Column("type", String(64), nullable=False),
    Column("plan_version", Integer, nullable=False),
    Column("step_id", KEY, nullable=True),
    Column("attempt_id", ID, nullable=True),
    Column("decision_id", ID, nullable=True),
    Column("from_state", STATE, nullable=True),
    Column("to_state", STATE, nullable=True),
    Column("actor_type", String(32), nullable=False),
    Column("actor_id", String(256), nullable=False),
    Column("message", String(1024), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    CheckConstraint("sequence >= 1", name="sequence_positive"),
)

# The token usage the attempts' runtimes reported (ReportUsage), one row per usage id: the
# primary key is what makes a repeated report count once; ``long_tasks.tokens_used`` is
# the running sum, moved in the same transaction as the row is inserted.
long_task_usage = Table(
    "long_task_usage",
    metadata,
    Column("task_id", ID, _task(), primary_key=True),
    Column("usage_id", KEY, primary_key=True),
    Column("attempt_id", ID, nullable=False),
    Column("tokens", BigInteger, nullable=False),
    Column("recorded_at_ms", BigInteger, nullable=False),
    CheckConstraint("tokens > 0", name="tokens_positive"),
)

# A person's action through the one action contract (``LongTaskService.Act``), kept by its
# client-chosen one-time id in the transaction of the change it made: a repeated id finds
# its row and acts no second time. Only actions that changed the task are kept.
long_task_actions = Table(
    "long_task_actions",
    metadata,
    Column("task_id", ID, _task(), primary_key=True),
    Column("action_id", String(128), primary_key=True),
    Column("action", String(16), nullable=False),  # pause | resume | cancel | continue | ...
    Column("decision_id", ID, nullable=True),  # answer, approve, deny: the decision answered
    Column("answer", String(256), nullable=True),
    Column("actor_type", String(32), nullable=False),
    Column("actor_id", String(256), nullable=False),
    Column("task_version", BigInteger, nullable=False),  # the task's etag the action made
    Column("created_at_ms", BigInteger, nullable=False),
)

# One preflight of an ordinary run's tool-call tier (docs/long-tasks.md "Activation and
# promotion"): at most one row per run and tier, inserted when PreflightToolCall answers
# "preflight needed", its verdict written once the runtime's classifier decided.
run_preflights = Table(
    "run_preflights",
    metadata,
    Column("run_id", ID, ForeignKey("runs.id"), primary_key=True),
    Column("tier", String(32), primary_key=True),  # idempotent | queryable | non_idempotent
    Column("verdict", String(16), nullable=True),  # ordinary | promote; NULL: not yet told
    Column("path", String(16), nullable=True),  # lazy | deterministic | budget | plan
    Column("reason", String(1024), nullable=False),
    Column("confidence", Float, nullable=True),
    Column("requested_at_ms", BigInteger, nullable=False),
    Column("decided_at_ms", BigInteger, nullable=True),
)

# A task's continuation (docs/long-tasks.md "Continuations and catch-up", migration 0017): at
# most one per task, replaced by the next; it holds the queued task back from the scheduler
# while ``expected_version`` is the task's state_version and it has not fired.
long_task_continuations = Table(
    "long_task_continuations",
    metadata,
    Column("task_id", ID, _task(), primary_key=True),
    Column("kind", String(16), nullable=False),  # at | window
    Column("expected_version", BigInteger, nullable=False),
    Column("due_ms", BigInteger, nullable=True),  # None: missed, waiting for a person
    Column("time_zone", String(64), nullable=False, server_default=text("'UTC'")),
    Column("cron", String(256), nullable=True),
    Column("every_ms", BigInteger, nullable=True),
    Column("catchup_window_ms", BigInteger, nullable=False),
    Column("missed_total", Integer, nullable=False, server_default=text("0")),
    Column("note", String(1024), nullable=False, server_default=text("''")),
    Column("reason", String(1024), nullable=False, server_default=text("''")),
    Column("requested_by", String(256), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("fired_at_ms", BigInteger, nullable=True),
    CheckConstraint("kind IN ('at', 'window')", name="continuation_kind"),
    Index("ix_long_task_continuations_due_ms", "due_ms"),
)

LONG_TASK_TABLES: tuple[Table, ...] = (
    long_tasks,
    long_task_plan_versions,
    long_task_steps,
    long_task_criteria,
    long_task_side_effects,
    long_task_evidence,
    long_task_decisions,
    long_task_attempts,
    long_task_events,
    long_task_usage,
    long_task_actions,
    run_preflights,
    long_task_continuations,
)

# The notices outbox (kernel/db/notice_tables.py), written in the long-task door's commits.
from kernel.db.notice_tables import NOTICE_TABLES  # noqa: E402

LONG_TASK_TABLES = (*LONG_TASK_TABLES, *NOTICE_TABLES)
