"""Every gRPC call a server handled, counted and timed by a server interceptor, and its
``request_id`` (with the ``project`` and ``run_id`` its request names) on every log record the
call makes (kernel/logs.py).

Labels: ``service`` and ``method`` come from the method the server registered (a call to a
method it does not serve is not wrapped: its path is the caller's choice, an unbounded value),
``code`` is a gRPC status name. A stream is counted when it ends, its time its lifetime.

The request id is the caller's ``x-request-id`` metadata when it is a plain short token (the
gateway sends its own), else the call's AIP-155 ``request_id`` field, else a new one.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

from kernel import logs
from services.metric_children import Children

if TYPE_CHECKING:
    _Server = grpc.aio.ServerInterceptor[Any, Any]
else:
    _Server = grpc.aio.ServerInterceptor

REQUEST_ID_HEADER = "x-request-id"
_PLAIN_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
#: A unary call is milliseconds; a stream (WatchRun, a runtime's Connect) lasts hours.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 600, 3600)


class RpcMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        """Families on ``registry``; None: counted, exported nowhere (a process whose
        metrics leave these out)."""
        self.handled = Counter(
            "truerun_grpc_server_handled_total",
            "gRPC calls this server finished, by service, method and status code",
            ["service", "method", "code"],
            registry=registry,
        )
        self.handling = Histogram(
            "truerun_grpc_server_handling_seconds",
            "How long a gRPC call took, from its arrival to its status (a stream's lifetime)",
            ["service", "method"],
            buckets=BUCKETS,
            registry=registry,
        )
        self._handled = Children(self.handled)
        self._handling = Children(self.handling)

    def observe(self, service: str, method: str, code: str, seconds: float) -> None:
        self._handled(service, method, code).inc()
        self._handling(service, method).observe(seconds)

    def interceptor(self) -> grpc.aio.ServerInterceptor[Any, Any]:
        return _Interceptor(self)


def split_method(path: str) -> tuple[str, str]:
    """``/truerun.v1.RunService/CreateRun`` -> (``truerun.v1.RunService``, ``CreateRun``)."""
    service, _, method = path.lstrip("/").rpartition("/")
    return service, method


def request_id_of(metadata: Any, request: Any = None) -> str:
    for key, value in metadata or ():
        if key == REQUEST_ID_HEADER and isinstance(value, str) and _PLAIN_ID.fullmatch(value):
            return value
    field = getattr(request, "request_id", "")
    if isinstance(field, str) and _PLAIN_ID.fullmatch(field):
        return field
    # a correlation id, not a secret: 64 random bits without a syscall or a UUID object
    return f"{random.getrandbits(64):016x}"


def call_fields(metadata: Any, request: Any = None) -> dict[str, str]:
    """What a call's log records carry: its request id, and the ``project_id`` and
    ``run_id`` its request names (a plain short token each; the door binds the run's own)."""
    fields = {"request_id": request_id_of(metadata, request)}
    for name, key in (("project_id", "project"), ("run_id", "run_id")):
        value = getattr(request, name, "")
        if isinstance(value, str) and _PLAIN_ID.fullmatch(value):
            fields[key] = value
    return fields


def _code_of(context: Any, error: BaseException | None) -> str:
    """The call's status: what the handler set or aborted with, else OK when it returned,
    CANCELLED when the caller went away (the task cancelled, a stream closed), UNKNOWN for an
    exception (grpc's own answer)."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if error is None:
        return "OK"
    gone = isinstance(error, asyncio.CancelledError | GeneratorExit)
    return "CANCELLED" if gone else "UNKNOWN"


class _Interceptor(_Server):
    def __init__(self, metrics: RpcMetrics) -> None:
        self._metrics = metrics
        #: method path -> (the handler wrapped, its wrapping): a call of a method already
        #: seen reuses its wrapping instead of building handler and closures again.
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        path = details.method.decode() if isinstance(details.method, bytes) else details.method
        known = self._wrapped.get(path)
        if known is None or known[0] is not handler:
            known = self._wrapped[path] = (handler, self._wrap(str(path), handler))
        return known[1]

    def _wrap(self, path: str, handler: Any) -> Any:
        service, method = split_method(path)
        observe = self._metrics.observe

        # Each call runs in a task of its own (grpc.aio), whose context is a copy: the request
        # id is set for the rest of it with bind, never reset (a stream's generator may be
        # closed from another context, where a reset would fail).
        def unary(behaviour: Any) -> Any:
            async def call(request: Any, context: Any) -> Any:
                began, error = time.perf_counter(), None
                logs.bind(**call_fields(context.invocation_metadata(), request))
                try:
                    return await behaviour(request, context)
                except BaseException as raised:
                    error = raised
                    raise
                finally:
                    observe(service, method, _code_of(context, error), time.perf_counter() - began)

            return call

        def streaming(behaviour: Any) -> Any:
            async def call(request: Any, context: Any) -> AsyncIterator[Any]:
                began, error = time.perf_counter(), None
                logs.bind(**call_fields(context.invocation_metadata(), request))
                answer = behaviour(request, context)
                try:
                    if hasattr(answer, "__aiter__"):
                        async for item in answer:
                            yield item
                    else:  # a handler that writes with context.write
                        await answer
                except BaseException as raised:
                    error = raised
                    raise
                finally:
                    if hasattr(answer, "aclose"):  # its own cleanup now, not at collection
                        await answer.aclose()
                    observe(service, method, _code_of(context, error), time.perf_counter() - began)

            return call

        kinds = (
            ("unary_unary", grpc.unary_unary_rpc_method_handler, unary),
            ("stream_unary", grpc.stream_unary_rpc_method_handler, unary),
            ("unary_stream", grpc.unary_stream_rpc_method_handler, streaming),
            ("stream_stream", grpc.stream_stream_rpc_method_handler, streaming),
        )
        for attribute, make, wrap in kinds:
            behaviour = getattr(handler, attribute)
            if behaviour is not None:
                return make(
                    wrap(behaviour),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler
