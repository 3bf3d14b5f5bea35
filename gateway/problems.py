"""Errors as RFC 9457 ``application/problem+json``: {type, title, status, detail, reason},
plus ``run_id`` for IDEMPOTENCY_KEY_REUSED (the run the key already made).

``reason`` is the stable ErrorReason name the gRPC API sent (RUN_VERSION_CONFLICT, ...) or
one of the gateway's own (UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND, REQUEST_TOO_LARGE,
METHOD_NOT_ALLOWED, UNAVAILABLE, UPSTREAM_ERROR, INTERNAL: gateway/catch_all.py);
docs/gateway.md lists them.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from starlette.responses import Response

PROBLEM_JSON = "application/problem+json"

# gRPC code -> HTTP status. Anything not listed is the services' fault: 502.
_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}

# A reason whose HTTP status is not its gRPC code's. IDEMPOTENCY_KEY_REUSED (gRPC
# ALREADY_EXISTS) is 422 as Stripe and the IETF Idempotency-Key draft answer a key sent
# again with another body: not a conflict to retry, a request to fix (docs/gateway.md
# "Errors").
# INPUT_TOO_LARGE (gRPC INVALID_ARGUMENT) is 413 Content Too Large.
_STATUS_OF_REASON: dict[str, int] = {"IDEMPOTENCY_KEY_REUSED": 422, "INPUT_TOO_LARGE": 413}

# ErrorInfo metadata a problem carries as its own members (RFC 9457 extension members):
# the first run of a reused key, so a client can fetch the run its key already made.
# An input past a bound: the limit and the setting that sets it (docs/gateway.md "Errors").
_BOUND_MEMBERS = ("limit", "setting", "allowed", "found")
_MEMBERS_OF_REASON: dict[str, tuple[str, ...]] = {
    "IDEMPOTENCY_KEY_REUSED": ("run_id",),
    "INPUT_OUT_OF_BOUNDS": _BOUND_MEMBERS,
    "INPUT_TOO_LARGE": _BOUND_MEMBERS,
}


class Problem(Exception):
    """Raised anywhere in a handler; the app turns it into the problem response."""

    def __init__(
        self,
        status: int,
        reason: str,
        detail: str,
        members: dict[str, str] | None = None,
        *,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.reason = reason
        self.detail = detail
        self.members = members or {}  # extension members, e.g. run_id
        #: A refusal past a bound: the Retry-After header (the services' RetryInfo).
        self.retry_after_s = retry_after_s


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> Response:
    if problem.retry_after_s is not None:
        headers = {**(headers or {}), "Retry-After": str(problem.retry_after_s)}
    body = {
        **problem.members,
        "type": f"https://truerun.dev/problems/{problem.reason.lower().replace('_', '-')}",
        "title": HTTPStatus(problem.status).phrase,
        "status": problem.status,
        "detail": problem.detail,
        "reason": problem.reason,
    }
    return Response(
        json.dumps(body), status_code=problem.status, media_type=PROBLEM_JSON, headers=headers
    )


def reason_of(error: grpc.RpcError) -> str:
    """The ErrorInfo reason the services attached ('' when none)."""
    info = _error_info(error)
    return str(info.reason) if info is not None else ""


def _details(error: grpc.RpcError) -> list[Any]:
    trailing = getattr(error, "trailing_metadata", None)
    metadata: Any = (trailing() if trailing else None) or ()
    for key, value in metadata:
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return list(status_pb2.Status.FromString(value).details)
    return []


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    for detail in _details(error):
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    return None


def _retry_after(error: grpc.RpcError) -> int | None:
    """The RetryInfo delay in whole seconds (at least 1), None without one."""
    for detail in _details(error):
        retry = error_details_pb2.RetryInfo()
        if detail.Unpack(retry):
            delay = retry.retry_delay
            return max(1, int(delay.seconds) + (1 if delay.nanos > 0 else 0))
    return None


def code_of(error: grpc.RpcError) -> grpc.StatusCode:
    # grpc.aio's errors are not grpc.Call instances, but they have code() and details().
    code = getattr(error, "code", None)
    return code() if callable(code) else grpc.StatusCode.UNKNOWN


def from_rpc_error(error: grpc.RpcError) -> Problem:
    code = code_of(error)
    info = _error_info(error)
    status = _STATUS.get(code, 502)
    reason = (info.reason if info is not None else "") or (
        code.name if status != 502 else "UPSTREAM_ERROR"
    )
    status = _STATUS_OF_REASON.get(reason, status)
    members = {
        name: str(info.metadata[name])
        for name in _MEMBERS_OF_REASON.get(reason, ())
        if info is not None and name in info.metadata
    }
    details_of = getattr(error, "details", None)
    details = details_of() if callable(details_of) else None
    return Problem(
        status,
        reason,
        str(details or code.name.lower()),
        members,
        retry_after_s=_retry_after(error) if status == 429 else None,
    )
