"""Domain errors, each with a stable reason that every API surface carries unchanged."""

from __future__ import annotations

from enum import StrEnum


class ErrorReason(StrEnum):
    RUN_VERSION_CONFLICT = "RUN_VERSION_CONFLICT"
    INVALID_RUN_TRANSITION = "INVALID_RUN_TRANSITION"
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    ATTEMPT_NOT_FOUND = "ATTEMPT_NOT_FOUND"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    IDEMPOTENCY_KEY_CONFLICT = "IDEMPOTENCY_KEY_CONFLICT"
    REQUEST_ID_REUSED = "REQUEST_ID_REUSED"
    RUNTIME_TASK_MISMATCH = "RUNTIME_TASK_MISMATCH"
    STORE_BUSY = "STORE_BUSY"
    INTERNAL = "INTERNAL"
    EXECUTION_SCOPE_BUSY = "EXECUTION_SCOPE_BUSY"
    OBSERVATION_REJECTED = "OBSERVATION_REJECTED"
    WORKSPACE_NOT_ISOLATED = "WORKSPACE_NOT_ISOLATED"
    AGENT_NOT_FOUND = "AGENT_NOT_FOUND"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    INVALID_CURSOR = "INVALID_CURSOR"
    RUNTIME_INSTANCE_OF_ANOTHER_OWNER = "RUNTIME_INSTANCE_OF_ANOTHER_OWNER"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    TOO_MANY_FAILED_AUTHENTICATIONS = "TOO_MANY_FAILED_AUTHENTICATIONS"
    TOO_MANY_BAD_SIGNATURES = "TOO_MANY_BAD_SIGNATURES"
    SCHEDULE_NOT_FOUND = "SCHEDULE_NOT_FOUND"
    SCHEDULE_EXISTS = "SCHEDULE_EXISTS"
    SCHEDULE_VERSION_CONFLICT = "SCHEDULE_VERSION_CONFLICT"
    WEBHOOK_SIGNATURE_INVALID = "WEBHOOK_SIGNATURE_INVALID"
    WEBHOOKS_NOT_CONFIGURED = "WEBHOOKS_NOT_CONFIGURED"
    LONG_TASK_NOT_FOUND = "LONG_TASK_NOT_FOUND"
    LONG_TASK_EXISTS = "LONG_TASK_EXISTS"
    LONG_TASK_VERSION_CONFLICT = "LONG_TASK_VERSION_CONFLICT"
    LONG_TASK_LEASE_NOT_HELD = "LONG_TASK_LEASE_NOT_HELD"
    INVALID_LONG_TASK_TRANSITION = "INVALID_LONG_TASK_TRANSITION"
    INVALID_STEP_TRANSITION = "INVALID_STEP_TRANSITION"
    LONG_TASK_LIMIT_REACHED = "LONG_TASK_LIMIT_REACHED"
    PROMOTION_FAILED = "PROMOTION_FAILED"
    AUTO_PROMOTION_REFUSED = "AUTO_PROMOTION_REFUSED"
    NOTICE_WEBHOOK_INVALID = "NOTICE_WEBHOOK_INVALID"
    NOTICES_OF_ANOTHER_OWNER = "NOTICES_OF_ANOTHER_OWNER"
    INVALID_CONTINUATION = "INVALID_CONTINUATION"
    NOTICE_WEBHOOK_NOT_ALLOWED = "NOTICE_WEBHOOK_NOT_ALLOWED"
    OWNER_NOT_SERVED = "OWNER_NOT_SERVED"
    RESERVED_KEY = "RESERVED_KEY"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    OWNER_NOT_PERMITTED = "OWNER_NOT_PERMITTED"
    SELF_APPROVAL_REFUSED = "SELF_APPROVAL_REFUSED"
    APPROVER_NOT_ELIGIBLE = "APPROVER_NOT_ELIGIBLE"
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"
    ALREADY_APPROVED = "ALREADY_APPROVED"
    INPUT_OUT_OF_BOUNDS = "INPUT_OUT_OF_BOUNDS"
    INPUT_TOO_LARGE = "INPUT_TOO_LARGE"


class DomainError(Exception):
    """Base of every expected failure; ``reason`` is stable, ``message`` is for people."""

    reason: ErrorReason = ErrorReason.INTERNAL

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = metadata


class InvalidTransition(DomainError):
    reason = ErrorReason.INVALID_RUN_TRANSITION


class VersionConflict(DomainError):
    reason = ErrorReason.RUN_VERSION_CONFLICT


class RunNotFound(DomainError):
    reason = ErrorReason.RUN_NOT_FOUND


class AttemptNotFound(DomainError):
    reason = ErrorReason.ATTEMPT_NOT_FOUND


class InvalidArgument(DomainError):
    reason = ErrorReason.INVALID_ARGUMENT


class IdempotencyKeyConflict(DomainError):
    reason = ErrorReason.IDEMPOTENCY_KEY_CONFLICT


class RequestIdReused(DomainError):
    reason = ErrorReason.REQUEST_ID_REUSED


class RuntimeTaskMismatch(DomainError):
    reason = ErrorReason.RUNTIME_TASK_MISMATCH


class StoreBusy(DomainError):
    reason = ErrorReason.STORE_BUSY


class AgentNotFound(DomainError):
    reason = ErrorReason.AGENT_NOT_FOUND


class WorkspaceNotIsolated(DomainError):
    reason = ErrorReason.WORKSPACE_NOT_ISOLATED


class ExecutionScopeBusy(DomainError):
    reason = ErrorReason.EXECUTION_SCOPE_BUSY


class Unauthenticated(DomainError):
    reason = ErrorReason.UNAUTHENTICATED


class InvalidCursor(DomainError):
    reason = ErrorReason.INVALID_CURSOR


class PermissionDenied(DomainError):
    """A valid caller without the right: a project its token does not see (for a create),
    an operator command without an operator token."""

    reason = ErrorReason.PERMISSION_DENIED


class Refused(DomainError):
    """A refusal past a bound, with the whole seconds until it lifts (RetryInfo in gRPC,
    Retry-After in REST; ErrorInfo metadata ``retry_after_s``)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message, retry_after_s=str(retry_after_s))
        self.retry_after_s = retry_after_s


class TooManyFailures(Refused):
    """Too many failed authentications of one credential, or from one source, past the
    bound of kernel/auth_bound.py (RESOURCE_EXHAUSTED); a valid credential never meets it."""

    reason = ErrorReason.TOO_MANY_FAILED_AUTHENTICATIONS


class TooManyBadSignatures(Refused):
    """Too many webhook deliveries with a bad signature for one schedule (RESOURCE_EXHAUSTED);
    a correctly signed delivery never meets it."""

    reason = ErrorReason.TOO_MANY_BAD_SIGNATURES


class InstanceOfAnotherOwner(DomainError):
    """A Hello names a runtime instance bound to another owner (PERMISSION_DENIED)."""

    reason = ErrorReason.RUNTIME_INSTANCE_OF_ANOTHER_OWNER


class ScheduleNotFound(DomainError):
    reason = ErrorReason.SCHEDULE_NOT_FOUND


class ScheduleExists(DomainError):
    reason = ErrorReason.SCHEDULE_EXISTS


class ScheduleVersionConflict(DomainError):
    reason = ErrorReason.SCHEDULE_VERSION_CONFLICT


class WebhookSignatureInvalid(DomainError):
    """A delivery whose signature, timestamp or replay window does not check out."""

    reason = ErrorReason.WEBHOOK_SIGNATURE_INVALID


class WebhooksNotConfigured(DomainError):
    reason = ErrorReason.WEBHOOKS_NOT_CONFIGURED


class LongTaskNotFound(DomainError):
    """No long task with this id, or no step or decision of it with the given id (the
    metadata names which)."""

    reason = ErrorReason.LONG_TASK_NOT_FOUND


class LongTaskExists(DomainError):
    reason = ErrorReason.LONG_TASK_EXISTS


class LongTaskVersionConflict(DomainError):
    """The task (or the step) changed since the version the caller sent, or the step is not
    in the task's current plan version: nothing was written; read it again."""

    reason = ErrorReason.LONG_TASK_VERSION_CONFLICT


class LongTaskLeaseNotHeld(DomainError):
    """A step action from an attempt that does not hold the task's lease (another attempt
    holds it, it was released, or it expired): nothing was written."""

    reason = ErrorReason.LONG_TASK_LEASE_NOT_HELD


class InvalidLongTaskTransition(DomainError):
    """The task's state does not allow the command; metadata ``refusal`` says why."""

    reason = ErrorReason.INVALID_LONG_TASK_TRANSITION


class LongTaskLimitReached(DomainError):
    """The owner keeps as many unfinished long tasks as the cap allows: nothing created."""

    reason = ErrorReason.LONG_TASK_LIMIT_REACHED


class InvalidStepTransition(DomainError):
    """The step's state or record does not allow the action; metadata ``refusal`` says why."""

    reason = ErrorReason.INVALID_STEP_TRANSITION


class PromotionFailed(DomainError):
    """A run's promotion to a long task could not be written: nothing of it was kept, and
    the run was told to stop (a visible error, never an unmanaged run)."""

    reason = ErrorReason.PROMOTION_FAILED


class AutoPromotionRefused(DomainError):
    """An automatic promotion the owner's unfinished-task cap does not allow (an explicit
    CreateLongTask with ``override_unfinished_cap`` still may): nothing created."""

    reason = ErrorReason.AUTO_PROMOTION_REFUSED


class NoticeWebhookInvalid(DomainError):
    """A notice webhook URL that is not an absolute http(s) URL, or no TRUERUN_WEBHOOK_KEY."""

    reason = ErrorReason.NOTICE_WEBHOOK_INVALID


class NoticeWebhookNotAllowed(DomainError):
    """A notice webhook URL the server does not post to (TRUERUN_NOTICE_WEBHOOK_ALLOW, or a
    link-local / metadata address): nothing registered."""

    reason = ErrorReason.NOTICE_WEBHOOK_NOT_ALLOWED


class NoticesOfAnotherOwner(DomainError):
    """A person's token asked for another owner's notices or deliveries."""

    reason = ErrorReason.NOTICES_OF_ANOTHER_OWNER


class InvalidContinuation(DomainError):
    """A long task's continuation cannot be used (no time, a bad cron or zone, a window that
    never opens, a catch-up window out of range); the message names the field."""

    reason = ErrorReason.INVALID_CONTINUATION


class OwnerNotServed(DomainError):
    """No runtime of the owner is bound to the project (docs/tenancy.md): work created
    there could never be delivered, so nothing is created."""

    reason = ErrorReason.OWNER_NOT_SERVED


class ReservedKey(DomainError):
    """An idempotency key or request id in the space truerun derives its own keys in."""

    reason = ErrorReason.RESERVED_KEY


class IdempotencyKeyReused(DomainError):
    """The idempotency key was used before with a different request (metadata: run_id)."""

    reason = ErrorReason.IDEMPOTENCY_KEY_REUSED


class OwnerNotPermitted(DomainError):
    """The caller may not act for the object's owner (docs/tenancy.md)."""

    reason = ErrorReason.OWNER_NOT_PERMITTED


class SelfApprovalRefused(DomainError):
    """The approval policy refuses an approval by the creator of what it approves."""

    reason = ErrorReason.SELF_APPROVAL_REFUSED


class ApproverNotEligible(DomainError):
    """The approver is in none of the groups the approval policy names."""

    reason = ErrorReason.APPROVER_NOT_ELIGIBLE


class ApprovalExpired(DomainError):
    """The approval's window is over; nothing was approved."""

    reason = ErrorReason.APPROVAL_EXPIRED


class AlreadyApproved(DomainError):
    """This approver has already approved; a grant counts once."""

    reason = ErrorReason.ALREADY_APPROVED


class InputOutOfBounds(InvalidArgument):
    """A JSON value or text past an input bound (depth, keys/items, string length;
    kernel/json_bounds.py): nothing written. Metadata: limit, setting, allowed, found."""

    reason = ErrorReason.INPUT_OUT_OF_BOUNDS


class InputTooLarge(InputOutOfBounds):
    """A JSON value or text larger encoded than TRUERUN_INPUT_MAX_BYTES: nothing written
    (HTTP 413)."""

    reason = ErrorReason.INPUT_TOO_LARGE
