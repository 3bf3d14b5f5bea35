"""The client side of API token authentication: every call on a channel carries
``authorization: Bearer TOKEN``. ``token`` may be a function, read per call (the gateway
forwards each request's own caller). For grpc.aio channels (``bearer_interceptors``) and
for synchronous ones (``with_bearer``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

Token = str | Callable[[], str]
#: More metadata a call carries, read per call (the gateway's vouching: coordinator/api/auth.py).
Extra = Callable[[], list[tuple[str, str]]]

if TYPE_CHECKING:  # generic in the stubs only
    _UnaryUnary = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    _UnaryStream = grpc.aio.UnaryStreamClientInterceptor[Any, Any]
    _StreamStream = grpc.aio.StreamStreamClientInterceptor[Any, Any]
    _SyncUnaryUnary = grpc.UnaryUnaryClientInterceptor[Any, Any]
    _SyncUnaryStream = grpc.UnaryStreamClientInterceptor[Any, Any]
    _CallDetails = grpc.ClientCallDetails
else:
    _UnaryUnary = grpc.aio.UnaryUnaryClientInterceptor
    _UnaryStream = grpc.aio.UnaryStreamClientInterceptor
    _StreamStream = grpc.aio.StreamStreamClientInterceptor
    _SyncUnaryUnary = grpc.UnaryUnaryClientInterceptor
    _SyncUnaryStream = grpc.UnaryStreamClientInterceptor
    _CallDetails = grpc.ClientCallDetails


def _value(token: Token) -> str:
    return token() if callable(token) else token


def _metadata(existing: Any, token: Token, extra: Extra | None = None) -> list[tuple[str, str]]:
    added = extra() if extra is not None else []
    replaced = {"authorization", *(key for key, _ in added)}
    metadata = [(k, v) for k, v in (existing or ()) if k not in replaced]
    if value := _value(token):
        metadata.append(("authorization", f"Bearer {value}"))
    metadata.extend(added)
    return metadata


class _AioDetails:
    def __init__(self, token: Token, extra: Extra | None = None) -> None:
        self._token = token
        self._extra = extra

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        return grpc.aio.ClientCallDetails(
            details.method,
            details.timeout,
            grpc.aio.Metadata(*_metadata(details.metadata, self._token, self._extra)),
            details.credentials,
            details.wait_for_ready,
        )


# A class a kind: grpc.aio files an interceptor under the first kind it is (if/elif), so one
# class of several kinds would never see the others' calls.
class _AioUnaryBearer(_AioDetails, _UnaryUnary):
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._details(details), request)


class _AioStreamBearer(_AioDetails, _UnaryStream):
    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._details(details), request)


class _AioBidiBearer(_AioDetails, _StreamStream):
    async def intercept_stream_stream(
        self,
        continuation: Callable[..., Any],
        details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await continuation(self._details(details), request_iterator)


def bearer_interceptors(token: Token, extra: Extra | None = None) -> list[Any]:
    """Interceptors for ``grpc.aio.insecure_channel(..., interceptors=...)``; ``extra``:
    more metadata entries per call."""
    return [
        _AioUnaryBearer(token, extra),
        _AioStreamBearer(token, extra),
        _AioBidiBearer(token, extra),
    ]


class _Details(_CallDetails):
    def __init__(self, base: Any, metadata: list[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = tuple(metadata)
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class _SyncBearer(_SyncUnaryUnary, _SyncUnaryStream):
    def __init__(self, token: Token) -> None:
        self._token = token

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(_Details(details, _metadata(details.metadata, self._token)), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(_Details(details, _metadata(details.metadata, self._token)), request)


def with_bearer(channel: grpc.Channel, token: Token) -> grpc.Channel:
    """A synchronous channel whose every call carries the token."""
    return grpc.intercept_channel(channel, _SyncBearer(token))
