"""A server span per REST request (its context then rides the gRPC metadata to the
coordinator: kernel.telemetry's client interceptor). Spans are named by method and route
template, never by the concrete path (which holds ids); an incoming W3C ``traceparent`` header
is honoured, so a caller's trace continues through truerun."""

from __future__ import annotations

from typing import Any

from opentelemetry import propagate
from opentelemetry.trace import SpanKind
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kernel.telemetry import tracer


class TracingMiddleware:
    def __init__(self, app: ASGIApp, routes: list[Any]) -> None:
        self._app = app
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        name = f"{scope['method']} {self._template(scope)}"
        parent = propagate.extract(headers)
        with tracer.start_as_current_span(name, context=parent, kind=SpanKind.SERVER):
            await self._app(scope, receive, send)

    def _template(self, scope: Scope) -> str:
        for route in self._routes:
            if isinstance(route, Route) and route.matches(scope)[0] is Match.FULL:
                return route.path
        return "static"
