"""OpenTelemetry traces: the exporter of a process, gRPC interceptors that carry W3C trace
context in call metadata, and the one tracer every module names its spans with.

``TRUERUN_OTEL_EXPORTER``: ``none`` (default; the API's no-op tracer, spans cost nothing),
``console`` (one JSON object per span and line on stdout, for development and tests) or
``otlp`` (batched to ``TRUERUN_OTEL_ENDPOINT`` over gRPC). Span names and attributes carry
ids of runs and attempts, never secrets (tokens, specs, payloads).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from kernel import logs

EXPORTERS = ("none", "console", "otlp")
tracer = trace.get_tracer("truerun")


class Telemetry:
    """The configured tracer provider of this process (None: tracing off)."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.provider = provider

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def shutdown(self) -> None:
        """Flush what is buffered (called last, after the servers stopped)."""
        if self.provider is not None:
            self.provider.shutdown()


def _one_line(span: ReadableSpan) -> str:
    return str(span.to_json(indent=None)) + "\n"


def configure(service_name: str, exporter: str, endpoint: str = "") -> Telemetry:
    """Install the process-wide tracer provider named by ``exporter``."""
    if exporter not in EXPORTERS:
        raise SystemExit(f"TRUERUN_OTEL_EXPORTER={exporter!r} is not one of {EXPORTERS}")
    if exporter == "none":
        return Telemetry(None)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter == "console":
        console = ConsoleSpanExporter(out=sys.stdout, formatter=_one_line)
        provider.add_span_processor(SimpleSpanProcessor(console))
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        otlp = OTLPSpanExporter(endpoint=endpoint or None)
        provider.add_span_processor(BatchSpanProcessor(otlp))
    trace.set_tracer_provider(provider)
    return Telemetry(provider)


def enabled() -> bool:
    """True when this process exports spans (so lookups made only for them are worth it)."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)


_NO_SPAN = trace.INVALID_SPAN


# -- W3C trace context as a string (runtime protocol fields, stored with a run) -------------


def current_traceparent() -> str:
    """The current span's context as a W3C ``traceparent`` value; "" when there is none."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent", "")


def context_of(traceparent: str) -> otel_context.Context | None:
    """The context a ``traceparent`` names, to parent spans on; None for ""."""
    if not traceparent:
        return None
    return propagate.extract({"traceparent": traceparent})


@contextmanager
def span(
    name: str,
    attributes: Mapping[str, str | int] | None = None,
    parent: str = "",
    kind: SpanKind = SpanKind.INTERNAL,
) -> Iterator[Span]:
    """A span, as a child of ``parent`` (a traceparent) when given, else of the current one.
    With no exporter, the no-op span at once: the hot path (several spans per run) then skips
    the no-op tracer's context switching too."""
    if not enabled():
        yield _NO_SPAN
        return
    with tracer.start_as_current_span(
        name, context=context_of(parent), kind=kind, attributes=attributes
    ) as current:
        yield current


def record(
    name: str, parent: str, start_ns: int, attributes: Mapping[str, str | int] | None = None
) -> None:
    """A span that began at ``start_ns`` and ends now, in the trace ``parent`` names: for a
    step of a run done among others (a claim of several runs, a batch of events)."""
    if not parent:
        return
    tracer.start_span(
        name, context=context_of(parent), attributes=attributes, start_time=start_ns
    ).end()


# -- gRPC ---------------------------------------------------------------------------------


def _metadata_with_context(metadata: Any) -> Any:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    request_id = logs.current().get("request_id")
    if request_id:  # the server's log records then name the caller's request (the gateway's)
        carrier["x-request-id"] = request_id
    return grpc.aio.Metadata(*(metadata or ()), *carrier.items())


if TYPE_CHECKING:  # generic in the stubs only
    _UnaryUnary = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    _UnaryStream = grpc.aio.UnaryStreamClientInterceptor[Any, Any]
    _Server = grpc.aio.ServerInterceptor[Any, Any]
else:
    _UnaryUnary = grpc.aio.UnaryUnaryClientInterceptor
    _UnaryStream = grpc.aio.UnaryStreamClientInterceptor
    _Server = grpc.aio.ServerInterceptor


class _ClientInterceptor(_UnaryUnary, _UnaryStream):
    """A client span per call, its context in the call's metadata."""

    async def intercept_unary_unary(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        with tracer.start_as_current_span(
            _name(client_call_details.method), kind=SpanKind.CLIENT
        ) as current:
            call = await continuation(_with_context(client_call_details), request)
            try:
                await call  # the span lasts as long as the call
            except grpc.aio.AioRpcError as error:  # the caller sees it on the call itself
                current.set_status(Status(StatusCode.ERROR, error.code().name))
            return call

    async def intercept_unary_stream(
        self,
        continuation: Callable[..., Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        # Streams are long: their context travels, but no client span is held open for them.
        return await continuation(_with_context(client_call_details), request)


def _with_context(details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
    return grpc.aio.ClientCallDetails(
        details.method,
        details.timeout,
        _metadata_with_context(details.metadata),
        details.credentials,
        details.wait_for_ready,
    )


def _name(method: Any) -> str:
    text = method.decode() if isinstance(method, bytes) else str(method)
    return text.lstrip("/")


def client_interceptors() -> list[Any]:
    return [_ClientInterceptor()]


class _ServerInterceptor(_Server):
    """A server span per unary call, parented on the caller's context from the metadata.
    Streaming calls are passed through: a stream lives for hours, and the runtime protocol
    carries trace context on its messages instead (Start, events)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        carrier = {
            k: v for k, v in (handler_call_details.invocation_metadata or ()) if isinstance(v, str)
        }
        name = _name(handler_call_details.method)
        behaviour = handler.unary_unary

        async def traced(request: Any, context: Any) -> Any:
            parent = propagate.extract(carrier)
            with tracer.start_as_current_span(name, context=parent, kind=SpanKind.SERVER):
                return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(
            traced,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def server_interceptors() -> list[grpc.aio.ServerInterceptor[Any, Any]]:
    return [_ServerInterceptor()]
