"""Every command of the run lifecycle, as plain data.

Run commands target a run and may carry the version the caller saw (``expected_version``):
when given, a different current version is a RUN_VERSION_CONFLICT. Runtime commands target
one attempt and are bound to its runtime task id and a per-attempt event sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from coordinator.domain.approvals import DEFAULT_POLICY, ApprovalPolicy
from coordinator.domain.model import Actor
from coordinator.domain.states import ScopePolicy
from kernel.records import fast

#: How long a callback token stays valid after the start fence, and after each heartbeat
#: that vouches for its attempt (so a multi-day attempt keeps its authority).
CALLBACK_TOKEN_TTL_MS = 86_400_000


@fast
@dataclass(frozen=True, slots=True)
class RunSpec:
    """What a caller asks for when it creates a run."""

    project_id: str
    owner_id: str
    task_id: str
    created_by: Actor
    task_revision: int = 0
    agent_id: str | None = None
    execution_scope: str | None = None
    scope_policy: ScopePolicy = ScopePolicy.QUEUE
    trigger_type: str = "api"
    trigger_id: str | None = None
    idempotency_key: str | None = None
    priority: int = 0
    max_attempts: int = 1
    idempotent: bool = False
    run_now: bool = False
    requires_approval: bool = False
    #: Who must approve it (with ``requires_approval``; docs/state-model.md "Approvals").
    approval_policy: ApprovalPolicy = DEFAULT_POLICY
    pinned_runtime_instance_id: str | None = None
    required_labels: tuple[str, ...] = ()
    spec: dict[str, Any] = field(default_factory=dict)
    #: The W3C traceparent of the request that created the run (tracing on), kept on the
    #: run.created event so every later step of the run joins the same trace.
    trace_parent: str = ""


@fast
@dataclass(frozen=True, slots=True)
class CreateRun:
    spec: RunSpec


@fast
@dataclass(frozen=True, slots=True)
class RunCommand:
    run_id: str
    actor: Actor
    expected_version: int | None = None
    dedupe_key: str | None = None


@fast
@dataclass(frozen=True, slots=True)
class Approve(RunCommand):
    """One approver's approval; ``actor`` is the approver. ``approver_groups``: the groups
    the approver's credential names (never a request field)."""

    approver_groups: frozenset[str] = frozenset()


@fast
@dataclass(frozen=True, slots=True)
class Claim(RunCommand):
    runtime_instance_id: str = ""
    runtime_device_id: str = ""
    lease_ttl_ms: int = 30_000


@fast
@dataclass(frozen=True, slots=True)
class ReleaseBeforeFence(RunCommand):
    reason: str = "released"
    lease_token: str = ""  # when given, it must be the claim's: see decide.claim._check_lease
    #: The reconciler recovering an expired claim: counted, and past ``max_recoveries``
    #: (0: no limit) the run is dead-lettered instead of queued again.
    recovery: bool = False
    max_recoveries: int = 0


@fast
@dataclass(frozen=True, slots=True)
class StartFence(RunCommand):
    callback_token_hash: str = ""
    lease_token: str = ""  # when given, it must be the claim's: see decide.claim._check_lease
    callback_token_ttl_ms: int = CALLBACK_TOKEN_TTL_MS


@fast
@dataclass(frozen=True, slots=True)
class DispatchUnknown(RunCommand):
    """The start outcome (or later runtime state) cannot be known: sync goes stale.
    ``reason`` is the code recorded in the event; ``explanation`` the sentence a person
    reads as the reason of ``unknown`` (the code when empty). With ``attempt_id`` the
    command applies only while that attempt is the run's current one."""

    reason: str = "dispatch_unknown"
    explanation: str = ""
    attempt_id: str = ""


@fast
@dataclass(frozen=True, slots=True)
class RequestCancel(RunCommand):
    reason: str = "cancelled_by_user"


@fast
@dataclass(frozen=True, slots=True)
class MarkLost(RunCommand):
    reason: str = "worker_lost"


@fast
@dataclass(frozen=True, slots=True)
class RetryAttempt(RunCommand):
    """Automatic retry: a new attempt row under the same run."""

    #: The reconciler retrying a lost attempt: counted like ReleaseBeforeFence's recovery.
    recovery: bool = False
    max_recoveries: int = 0


@fast
@dataclass(frozen=True, slots=True)
class OrphanReported(RunCommand):
    """A runtime reports this attempt's task as running although truerun holds the attempt
    finished (or on another runtime). truerun's state stays; the report is recorded and the
    runtime is told to cancel the orphan."""

    attempt_id: str = ""
    runtime_instance_id: str = ""


class ResolveAs(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOT_STARTED = "not_started"


@fast
@dataclass(frozen=True, slots=True)
class OperatorCommand(RunCommand):
    """An operator's escape hatch. Audited: the actor must have an id and ``reason`` must say
    why; both are written into the command's events. Never a raw status write."""

    reason: str = ""


@fast
@dataclass(frozen=True, slots=True)
class Resolve(OperatorCommand):
    """A person settles an attempt truerun cannot know about: ``unknown`` (started, no
    evidence) or ``lost``. ``NOT_STARTED`` queues the run again on a new attempt."""

    resolved_as: ResolveAs = ResolveAs.FAILED


@fast
@dataclass(frozen=True, slots=True)
class FailRun(OperatorCommand):
    """Fail a run that never started (queued, paused or dead-lettered)."""


@fast
@dataclass(frozen=True, slots=True)
class PauseRun(OperatorCommand):
    """Take a queued run out of the queue; it keeps its attempt row and is never claimed."""


@fast
@dataclass(frozen=True, slots=True)
class ResumeRun(OperatorCommand):
    """Put a paused run back in the queue."""


@fast
@dataclass(frozen=True, slots=True)
class Requeue(OperatorCommand):
    """Put a dead-lettered run back in the queue; its recovery count starts again."""


@fast
@dataclass(frozen=True, slots=True)
class StartAccepted(RunCommand):
    """The runtime answered the Start accepted (StartResult), and no event of the attempt
    followed: the answer itself is evidence of acceptance (waiting_runtime). No seq is used
    up; a later ACCEPTED event is applied as usual."""

    attempt_id: str = ""


#: A long task's notice shown on its source runs (docs/long-tasks.md "Notices"): the only
#: note a finished run still takes, since the task it became goes on after it.
LONG_TASK_NOTICE = "long_task.notice"
#: The run events ``NoteRun`` may append (docs/long-tasks.md "Activation and promotion").
NOTE_TYPES = frozenset(
    {
        "activation.preflight_requested",
        "activation.classified",
        "activation.promoted",
        "activation.promotion_refused",
        "activation.promotion_failed",
        LONG_TASK_NOTICE,
    }
)


@fast
@dataclass(frozen=True, slots=True)
class NoteRun(RunCommand):
    """A fact about a run that changes none of its state (activation's preflights, verdicts
    and promotions on an unfinished run; a long task's notice on any): one event of a type
    in ``NOTE_TYPES`` is appended with its allow-listed, size-capped ``details``."""

    type: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@fast
@dataclass(frozen=True, slots=True)
class ManualRetry(RunCommand):
    """A person's retry: a new run that points at this one; this one never changes."""


class RuntimeOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


class InspectState(StrEnum):
    RUNNING = "running"
    ACCEPTED = "accepted"
    FINISHED = "finished"
    NOT_FOUND = "not_found"
    #: The runtime had the task and can no longer account for it (process and supervisor
    #: gone, no exit status recorded): gone, with an unknown outcome.
    LOST = "lost"
    #: Provably never started: the runtime journals every Start that reached its instance
    #: id before acting on it, and holds no record of this one (seed A §9).
    NEVER_RECEIVED = "never_received"


@fast
@dataclass(frozen=True, slots=True)
class InspectAnswer(RunCommand):
    """What the runtime holding an attempt answered when asked (trusted inspect, seed A §10).
    ``turn_active`` None means the runtime did not say; RUNNING with an idle turn is not
    proof of running. NOT_FOUND and LOST must come from the attempt's own, live runtime
    instance."""

    attempt_id: str = ""
    runtime_task_id: str = ""
    state: InspectState = InspectState.RUNNING
    turn_active: bool | None = None
    outcome: RuntimeOutcome | None = None
    exit_code: int | None = None
    #: The last seq the runtime wrote for the attempt (0: not said). A FINISHED answer from a
    #: runtime that wrote events truerun has not applied yet waits for those events.
    last_seq: int = 0
    #: NEVER_RECEIVED requeues the attempt as a counted recovery; past this many the run is
    #: dead-lettered instead (0: no limit), like a refused Start.
    max_recoveries: int = 0


@fast
@dataclass(frozen=True, slots=True)
class RuntimeCommand:
    """Evidence from a runtime about one attempt. ``seq`` must exceed the last applied one."""

    run_id: str
    attempt_id: str
    runtime_task_id: str
    seq: int
    actor: Actor


@fast
@dataclass(frozen=True, slots=True)
class DispatchRejected(RuntimeCommand):
    """The runtime refused the Start before starting anything: evidence that no process
    exists, whatever ``seq`` it carries (a refusal is an answer, not an event). ``permanent``:
    the spec can never run there, so the run fails with the reason; otherwise the same
    attempt goes back to the queue, and past ``max_refusals`` (0: no limit) refusals the
    run waits for a person (dead letter)."""

    reason: str = "rejected"
    permanent: bool = False
    max_refusals: int = 0


@fast
@dataclass(frozen=True, slots=True)
class RuntimeAccepted(RuntimeCommand):
    pass


@fast
@dataclass(frozen=True, slots=True)
class RuntimeRunning(RuntimeCommand):
    """``turn_active`` False: the task exists but its turn is idle; that is not proof of
    running (seed A §10), only of acceptance."""

    turn_active: bool | None = None


@fast
@dataclass(frozen=True, slots=True)
class RuntimeResult(RuntimeCommand):
    outcome: RuntimeOutcome = RuntimeOutcome.SUCCEEDED
    exit_code: int | None = None
    error_code: str | None = None
    error_summary: str | None = None


class NoteKind(StrEnum):
    OUTPUT = "output"
    SIGNALLED = "signalled"


@fast
@dataclass(frozen=True, slots=True)
class RuntimeNote(RuntimeCommand):
    """Evidence that changes no state but the attempt's last seq: a bounded output chunk, a
    signal sent. Keeps the per-attempt sequence gapless and recorded."""

    kind: NoteKind = NoteKind.OUTPUT
    details: dict[str, Any] = field(default_factory=dict)


@fast
@dataclass(frozen=True, slots=True)
class CancelConfirmed(RuntimeCommand):
    """The runtime acknowledges that the cancelled process has stopped."""

    exit_code: int | None = None


Command = (
    CreateRun
    | Approve
    | Claim
    | ReleaseBeforeFence
    | StartFence
    | DispatchUnknown
    | StartAccepted
    | RequestCancel
    | MarkLost
    | RetryAttempt
    | ManualRetry
    | NoteRun
    | Resolve
    | FailRun
    | PauseRun
    | ResumeRun
    | Requeue
    | InspectAnswer
    | OrphanReported
    | DispatchRejected
    | RuntimeAccepted
    | RuntimeRunning
    | RuntimeResult
    | RuntimeNote
    | CancelConfirmed
)
