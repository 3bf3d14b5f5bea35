"""Every failure leaves the server as a google.rpc.Status with exactly one ErrorInfo (AIP-193),
and a refusal past a bound with a RetryInfo too."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2

from kernel.errors import DomainError, ErrorReason, Refused, StoreBusy
from kernel.outages import is_outage

log = logging.getLogger(__name__)

DOMAIN = "truerun"

CODES: dict[ErrorReason, grpc.StatusCode] = {
    ErrorReason.RUN_VERSION_CONFLICT: grpc.StatusCode.ABORTED,
    ErrorReason.INVALID_RUN_TRANSITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.RUN_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorReason.ATTEMPT_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorReason.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.IDEMPOTENCY_KEY_CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    ErrorReason.REQUEST_ID_REUSED: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.RUNTIME_TASK_MISMATCH: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.STORE_BUSY: grpc.StatusCode.UNAVAILABLE,
    ErrorReason.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorReason.EXECUTION_SCOPE_BUSY: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.OBSERVATION_REJECTED: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.WORKSPACE_NOT_ISOLATED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.AGENT_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorReason.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorReason.INVALID_CURSOR: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.RUNTIME_INSTANCE_OF_ANOTHER_OWNER: grpc.StatusCode.PERMISSION_DENIED,
    ErrorReason.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorReason.TOO_MANY_FAILED_AUTHENTICATIONS: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorReason.TOO_MANY_BAD_SIGNATURES: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorReason.SCHEDULE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorReason.SCHEDULE_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorReason.SCHEDULE_VERSION_CONFLICT: grpc.StatusCode.ABORTED,
    ErrorReason.WEBHOOK_SIGNATURE_INVALID: grpc.StatusCode.UNAUTHENTICATED,
    ErrorReason.WEBHOOKS_NOT_CONFIGURED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.LONG_TASK_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorReason.LONG_TASK_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorReason.LONG_TASK_VERSION_CONFLICT: grpc.StatusCode.ABORTED,
    ErrorReason.LONG_TASK_LEASE_NOT_HELD: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.INVALID_LONG_TASK_TRANSITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.INVALID_STEP_TRANSITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.LONG_TASK_LIMIT_REACHED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorReason.PROMOTION_FAILED: grpc.StatusCode.ABORTED,
    ErrorReason.AUTO_PROMOTION_REFUSED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorReason.NOTICE_WEBHOOK_INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.NOTICES_OF_ANOTHER_OWNER: grpc.StatusCode.PERMISSION_DENIED,
    ErrorReason.INVALID_CONTINUATION: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.NOTICE_WEBHOOK_NOT_ALLOWED: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.OWNER_NOT_SERVED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.RESERVED_KEY: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.IDEMPOTENCY_KEY_REUSED: grpc.StatusCode.ALREADY_EXISTS,
    ErrorReason.OWNER_NOT_PERMITTED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorReason.SELF_APPROVAL_REFUSED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorReason.APPROVER_NOT_ELIGIBLE: grpc.StatusCode.PERMISSION_DENIED,
    ErrorReason.APPROVAL_EXPIRED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.ALREADY_APPROVED: grpc.StatusCode.ALREADY_EXISTS,
    ErrorReason.INPUT_OUT_OF_BOUNDS: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.INPUT_TOO_LARGE: grpc.StatusCode.INVALID_ARGUMENT,
}


def rich_status(
    reason: ErrorReason,
    message: str,
    metadata: dict[str, str],
    retry_after_s: int | None = None,
) -> status_pb2.Status:
    """The status with its ErrorInfo and, for a refusal past a bound, a RetryInfo beside it
    (AIP-193: how long to wait before trying again)."""
    code = CODES[reason]
    info = error_details_pb2.ErrorInfo(reason=reason.value, domain=DOMAIN, metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    details = [detail]
    if retry_after_s is not None:
        retry = any_pb2.Any()
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=Duration(seconds=retry_after_s)))
        details.append(retry)
    return status_pb2.Status(code=code.value[0], message=message, details=details)


def status_of(error: DomainError) -> status_pb2.Status:
    retry_after_s = error.retry_after_s if isinstance(error, Refused) else None
    return rich_status(error.reason, error.message, dict(error.metadata), retry_after_s)


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: DomainError) -> NoReturn:
    status = status_of(error)
    await context.abort(
        CODES[error.reason],
        error.message,
        trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
    )
    raise AssertionError("abort returns only by raising")  # pragma: no cover


def reason_of(error: grpc.RpcError) -> str:
    """The stable reason of a failed call, for clients ('' when the server sent none)."""
    trailing = getattr(error, "trailing_metadata", None)
    metadata: Any = (trailing() if trailing else None) or ()
    for key, value in metadata:
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return str(info.reason)
    return ""


Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]


def unary(fn: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Map domain errors to their status; a dependency out of reach becomes UNAVAILABLE
    (kernel/outages.py); anything else unexpected becomes INTERNAL, logged."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        try:
            return await fn(self, request, context)
        except DomainError as error:
            await abort(context, error)
        except (grpc.aio.AbortError, AssertionError):
            raise
        except Exception as error:
            await abort(context, _unexpected(fn.__name__, error))

    return wrapper


def refusal(method: str, error: Exception) -> status_pb2.Status:
    """The status a call of ``method`` failing with ``error`` answers, as a message: a
    stream's answer to one message it refuses without ending (RunService.CreateRunStream)."""
    domain = error if isinstance(error, DomainError) else _unexpected(method, error)
    return status_of(domain)


def _unexpected(method: str, error: Exception) -> DomainError:
    if is_outage(error):
        log.warning("%s: a dependency is out of reach: %r", method, error)
        return StoreBusy(f"a dependency is out of reach ({type(error).__name__}); try again")
    log.error("unexpected failure in %s", method, exc_info=error)
    return DomainError("internal error; see the server log")


StreamHandler = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]


def stream(fn: StreamHandler[Req, Resp]) -> StreamHandler[Req, Resp]:
    @functools.wraps(fn)
    async def wrapper(
        self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Resp]:
        try:
            async for item in fn(self, request, context):
                yield item
        except DomainError as error:
            await abort(context, error)
        except Exception as error:
            await abort(context, _unexpected(fn.__name__, error))

    return wrapper
