"""The long-task SDK's errors: a failed LongTaskAttemptService call as one exception that
carries the server's stable reason (the ErrorInfo of AIP-193), so an agent branches on
``error.reason`` ("LONG_TASK_VERSION_CONFLICT", "LONG_TASK_LEASE_NOT_HELD", ...) and
``error.refusal`` (the pure rule that refused, e.g. "OPEN_INTENT"), never on message text."""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

_DETAILS = "grpc-status-details-bin"


class LongTaskError(Exception):
    """A call the server refused or could not answer. ``code`` is the gRPC status,
    ``reason`` the ErrorInfo reason ("" when the server sent none: a transport failure),
    ``refusal`` the rule named in the ErrorInfo metadata ("" when none)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str,
        message: str,
        metadata: dict[str, str] | None = None,
    ) -> None:
        self.code = code
        self.reason = reason
        self.metadata = dict(metadata or {})
        self.refusal = self.metadata.get("refusal", "")
        self.message = message
        label = reason or code.name
        super().__init__(f"{label}: {message}" + (f" ({self.refusal})" if self.refusal else ""))

    @property
    def retryable(self) -> bool:
        """Only a transport failure (the call may not have reached truerun) is worth the
        same call again; every refusal would be refused again."""
        return self.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class VersionConflict(LongTaskError):
    """LONG_TASK_VERSION_CONFLICT: the step (or task) moved on; read the briefing again."""


class LeaseNotHeld(LongTaskError):
    """LONG_TASK_LEASE_NOT_HELD: this attempt no longer holds the task; stop working."""


class TransitionRefused(LongTaskError):
    """INVALID_STEP_TRANSITION / INVALID_LONG_TASK_TRANSITION: the rules refused the move."""


class Unauthenticated(LongTaskError):
    """UNAUTHENTICATED / PERMISSION_DENIED: the credential is not this run's attempt's."""


class PromotionFailed(LongTaskError):
    """PROMOTION_FAILED: the run could not become a long task; nothing of it was kept and
    truerun asked the run to stop. Stop: never go on with the tool call unmanaged."""


class PromotionRefused(LongTaskError):
    """AUTO_PROMOTION_REFUSED: the owner's unfinished-task cap refuses an automatic
    promotion (an explicit CreateLongTask with override_unfinished_cap still works)."""


_BY_REASON: dict[str, type[LongTaskError]] = {
    "PROMOTION_FAILED": PromotionFailed,
    "AUTO_PROMOTION_REFUSED": PromotionRefused,
    "LONG_TASK_VERSION_CONFLICT": VersionConflict,
    "LONG_TASK_LEASE_NOT_HELD": LeaseNotHeld,
    "INVALID_STEP_TRANSITION": TransitionRefused,
    "INVALID_LONG_TASK_TRANSITION": TransitionRefused,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": Unauthenticated,
}


def from_rpc(error: grpc.RpcError) -> LongTaskError:
    """The exception for a failed call: the class chosen by its ErrorInfo reason."""
    code = _call(error, "code") or grpc.StatusCode.UNKNOWN
    message = _call(error, "details") or ""
    reason, metadata = _error_info(error)
    cls = _BY_REASON.get(reason, LongTaskError)
    if not reason and code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        cls = Unauthenticated
    return cls(code, reason, str(message), metadata)


def _call(error: grpc.RpcError, name: str) -> Any:
    method = getattr(error, name, None)
    return method() if callable(method) else None


def _error_info(error: grpc.RpcError) -> tuple[str, dict[str, str]]:
    for key, value in _call(error, "trailing_metadata") or ():
        if key != _DETAILS or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info.reason, dict(info.metadata)
    return "", {}
