"""The state vocabularies of runs and attempts, persisted as lowercase strings."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    PENDING_APPROVAL = "pending_approval"
    QUEUED = "queued"
    DISPATCHING = "dispatching"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    RETRY_WAIT = "retry_wait"
    LOST = "lost"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    PAUSED = "paused"
    DEAD_LETTER = "dead_letter"

    @property
    def terminal(self) -> bool:
        return self in RUN_TERMINAL


RUN_TERMINAL = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
)


class AttemptStatus(StrEnum):
    """Control status: what truerun has decided about an attempt."""

    QUEUED = "queued"
    CLAIMED = "claimed"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        return self in ATTEMPT_TERMINAL


ATTEMPT_TERMINAL = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.TIMED_OUT,
        AttemptStatus.LOST,
    }
)

#: Attempts in these states hold a device slot, an agent slot and their execution scope.
ATTEMPT_LIVE = frozenset({AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING})


class ObservedState(StrEnum):
    """The last evidence a runtime gave about an attempt."""

    UNCONFIRMED = "unconfirmed"
    ACCEPTED = "accepted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class SyncState(StrEnum):
    """Whether truerun's view of an attempt agrees with the runtime's."""

    PENDING = "pending"
    IN_SYNC = "in_sync"
    STALE = "stale"
    DIVERGED = "diverged"


class DisplayState(StrEnum):
    """What every surface shows; computed on read, never stored."""

    PENDING_APPROVAL = "pending_approval"
    QUEUED = "queued"
    STARTING = "starting"
    WAITING_RUNTIME = "waiting_runtime"
    RUNNING = "running"
    CANCELLING = "cancelling"
    UNKNOWN = "unknown"
    WAITING_APPROVAL = "waiting_approval"
    RETRY_WAIT = "retry_wait"
    LOST = "lost"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    PAUSED = "paused"
    DEAD_LETTER = "dead_letter"


class ActorType(StrEnum):
    USER = "user"
    API_APP = "api_app"
    TRIGGER = "trigger"
    AGENT = "agent"
    RUNTIME = "runtime"
    SYSTEM = "system"
    SCHEDULER = "scheduler"
    RECONCILER = "reconciler"
    OPERATOR = "operator"


class ScopePolicy(StrEnum):
    """What happens when a run's execution scope already has a live attempt."""

    QUEUE = "queue"
    REJECT_NEW = "reject_new"
    CANCEL_IN_PROGRESS = "cancel_in_progress"
