"""Plain data for runs, attempts and events. Times are UTC milliseconds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.domain.approvals import Approval
from coordinator.domain.cursor import EventCursor
from coordinator.domain.states import (
    ActorType,
    AttemptStatus,
    ObservedState,
    RunStatus,
    ScopePolicy,
    SyncState,
)
from kernel.records import fast

RUNTIME_TASK_PREFIX = "truerun-"


def runtime_task_id_for(attempt_id: str) -> str:
    """The runtime task id is derived from the attempt id, never chosen by anyone."""
    return RUNTIME_TASK_PREFIX + attempt_id


@fast
@dataclass(frozen=True, slots=True)
class Actor:
    type: ActorType
    id: str = ""


@fast
@dataclass(frozen=True, slots=True)
class Run:
    id: str
    project_id: str
    owner_id: str
    task_id: str
    task_revision: int
    agent_id: str | None
    execution_scope: str | None
    scope_policy: ScopePolicy
    trigger_type: str
    trigger_id: str | None
    idempotency_key: str | None
    retry_of_run_id: str | None
    priority: int
    max_attempts: int
    idempotent: bool
    run_now: bool
    pinned_runtime_instance_id: str | None
    required_labels: tuple[str, ...]
    spec: dict[str, Any]
    status: RunStatus
    version: int
    event_sequence: int
    current_attempt_id: str | None
    attempt_count: int
    created_by: str
    created_at_ms: int
    updated_at_ms: int
    queued_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    cancel_requested_at_ms: int | None = None
    cancel_reason: str | None = None
    error_code: str | None = None
    error_summary: str | None = None
    #: How often the reconciler recovered this run (requeued an expired claim, retried a
    #: lost attempt) since it was created or an operator requeued it.
    recovery_count: int = 0
    #: A keyed run's ``request_fingerprint`` of the create that made it: a later create with
    #: the same key and another request is refused (IDEMPOTENCY_KEY_REUSED). None without a
    #: key, and for runs kept before fingerprints were (coordinator/domain/fingerprints.py).
    request_fingerprint: str | None = None
    #: What the run's approval requires and who gave it (docs/state-model.md "Approvals");
    #: None for a run created without ``requires_approval``. Kept after the run is queued,
    #: so it says who approved, and a retry of it asks for the same approval again.
    approval: Approval | None = None


@fast
@dataclass(frozen=True, slots=True)
class Attempt:
    id: str
    run_id: str
    attempt_no: int
    previous_attempt_id: str | None
    owner_id: str
    agent_id: str | None
    execution_scope: str | None
    runtime_task_id: str
    status: AttemptStatus
    observed_state: ObservedState
    sync_state: SyncState
    created_at_ms: int
    updated_at_ms: int
    observed_at_ms: int | None = None
    claimed_at_ms: int | None = None
    start_requested_at_ms: int | None = None
    runtime_instance_id: str | None = None
    runtime_device_id: str | None = None
    last_event_seq: int = 0
    cancel_requested_at_ms: int | None = None
    termination_reason: str | None = None
    lease_token: str | None = None
    lease_expires_at_ms: int | None = None
    heartbeat_at_ms: int | None = None
    callback_token_hash: str | None = None
    callback_token_expires_at_ms: int | None = None
    exit_code: int | None = None
    error_code: str | None = None
    error_summary: str | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    #: Why sync went stale, in words a person can check; cleared by evidence.
    sync_reason: str | None = None
    #: The attempt's output (coordinator/domain/output.py): stored bytes, log bytes
    #: received, the redacted line still being written and its hold, the cap reached, the
    #: last progress note.
    output_stored_bytes: int = 0
    output_log_bytes: int = 0
    output_held: str | None = None
    output_hold: str | None = None
    output_truncated: bool = False
    output_noted_at_ms: int | None = None

    @property
    def fenced(self) -> bool:
        """The start fence is set: a Start may have reached the runtime."""
        return self.start_requested_at_ms is not None


@fast
@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append; the store assigns its id and sequence."""

    type: str
    actor: Actor
    attempt_id: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)


@fast
@dataclass(frozen=True, slots=True)
class RunEvent:
    id: str
    run_id: str
    sequence: int
    type: str
    dedupe_key: str | None
    actor: Actor
    attempt_id: str | None
    payload: dict[str, Any]
    created_at_ms: int
    project_id: str = ""
    # Known once read back from the store; events a write returns do not carry it yet.
    cursor: EventCursor | None = None
