"""Every call of the services in ``PROTECTED`` authenticates its caller (seed B §17): an
``authorization: Bearer TOKEN`` metadata entry naming an API token
(coordinator/api/credentials.py). The interceptor covers every method of those services, so
an RPC added later is authenticated without anyone remembering to; handlers read the
caller with ``caller()``. RuntimeService authenticates with the runtime token in Hello,
WebhookService with each delivery's HMAC signature, LongTaskAttemptService and
RunPromotionService with the callback token of the calling run's attempt
(longtasks/api/credentials.py), and health and
reflection are open (probes, tools). Failed authentications are bounded per source and
token fingerprint, after the token was checked (coordinator/api/credentials.py
``FailureLimit``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import grpc

from coordinator.api.credentials import ApiTokens, FailureLimit, Principal, bearer
from coordinator.api.errors import abort
from kernel.errors import PermissionDenied, Unauthenticated

Ctx = grpc.aio.ServicerContext[Any, Any]
PROTECTED = frozenset(
    {
        "truerun.v1.RunService",
        "truerun.v1.CapacityService",
        "truerun.v1.ScheduleService",
        "truerun.v1.LongTaskService",
    }
)

_CALLER: ContextVar[Principal | None] = ContextVar("truerun_caller", default=None)


def caller() -> Principal:
    """The authenticated caller of the call being handled."""
    principal = _CALLER.get()
    if principal is None:  # a handler reached without the interceptor: refuse, never guess
        raise Unauthenticated("no authenticated caller")
    return principal


def operator() -> Principal:
    """The caller, who must hold an operator token."""
    principal = caller()
    if not principal.operator:
        raise PermissionDenied("an operator command needs an operator token")
    return principal


def as_caller(principal: Principal) -> None:
    """Act as ``principal`` in this context (in-process callers and tests)."""
    _CALLER.set(principal)


#: Metadata of a gateway's call: its own :service token, and the address of the client the
#: call is made for. Believed only together, the token valid (docs/gateway.md "Client
#: addresses"): anyone else sending them is counted by its own peer address.
GATEWAY_METADATA = "x-truerun-gateway"
CLIENT_METADATA = "x-truerun-client"
_MAX_ADDRESS = 64


def _peer(context: Ctx) -> str:
    """The peer's address without its port (``ipv4:1.2.3.4:5`` -> ``ipv4:1.2.3.4``)."""
    peer = context.peer() or ""
    return peer.rsplit(":", 1)[0] if peer.count(":") > 1 else peer


if TYPE_CHECKING:  # generic in the stubs only
    _Server = grpc.aio.ServerInterceptor[Any, Any]
else:
    _Server = grpc.aio.ServerInterceptor


class BearerAuth(_Server):
    def __init__(
        self,
        tokens: ApiTokens,
        limit: FailureLimit | None = None,
        services: frozenset[str] = PROTECTED,
    ) -> None:
        self._tokens = tokens
        self._limit = limit or FailureLimit()
        self._services = services
        #: method path -> (the handler wrapped, its wrapping), as in services/rpc_metrics.py
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    def _source(self, context: Ctx, metadata: dict[str, Any]) -> str:
        """Who failed: the client a gateway vouches for (its :service token valid), else
        the peer. Asked only after a failure, so a valid caller costs nothing more."""
        client = str(metadata.get(CLIENT_METADATA, "")).strip()[:_MAX_ADDRESS]
        vouching = self._tokens.authenticate(str(metadata.get(GATEWAY_METADATA, "")))
        if client and vouching is not None and vouching.service:
            return f"client:{client}"
        return _peer(context)

    async def _authenticate(self, context: Ctx) -> Principal:
        # The token first (constant-time): a valid one never meets the failure bound.
        metadata = dict(context.invocation_metadata() or ())
        token = bearer(str(metadata.get("authorization", "")))
        principal = self._tokens.authenticate(token)
        if principal is None:
            refused = self._limit.refuse(self._source(context, metadata), token)
            await abort(
                context,
                refused or Unauthenticated("an API token is required: authorization: Bearer TOKEN"),
            )
        assert principal is not None
        return principal

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None:  # not a method served here (its path is the caller's choice)
            return None
        path = str(details.method)
        known = self._wrapped.get(path)
        if known is None or known[0] is not handler:
            known = self._wrapped[path] = (handler, self._wrap(path, handler))
        return known[1]

    def _wrap(self, path: str, handler: Any) -> Any:
        service = path.split("/")[1] if path else ""
        if service not in self._services:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        raise TypeError(f"{path}: client streaming is not authenticated here")

    def _unary(self, behavior: Any) -> Any:
        async def call(request: Any, context: Ctx) -> Any:
            token = _CALLER.set(await self._authenticate(context))
            try:
                return await behavior(request, context)
            finally:
                _CALLER.reset(token)

        return call

    def _stream(self, behavior: Any) -> Any:
        # A stream is authenticated once, when it opens (tokens are fixed for the process's
        # life: none is revoked under an open stream). ``request``: a message, or the
        # iterator of a bidirectional stream's messages.
        async def call(request: Any, context: Ctx) -> AsyncIterator[Any]:
            _CALLER.set(await self._authenticate(context))
            async for item in behavior(request, context):
                yield item

        return call
