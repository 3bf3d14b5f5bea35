"""Prometheus metrics of the gateway process: every HTTP request counted and timed, labelled by
method, route template and status class (``2xx``, ``4xx``, ...). Labels are bounded
vocabularies: the template (``/v1/projects/{project}/runs/{run}``, a run command as
``{run}:cancel``), never the concrete path, so no run id, project or token ever becomes a label
value. The same middleware writes the access log (gateway/access_log.py).

A Server-Sent Events stream is counted when it ends; its duration is the stream's lifetime.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from starlette.routing import Match, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import access_log
from gateway.access_log import status_class
from kernel import logs
from kernel.tls import ServerTls

# no *_created series beside each one (services/metrics.py says why)
disable_created_metrics()  # type: ignore[no-untyped-call]

COMMAND_VERBS = frozenset(
    {"cancel", "approve", "retry", "resolve", "fail", "pause", "resume", "requeue"}
)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "truerun_gateway_http_requests_total",
            "HTTP requests the gateway answered, by method, route template and status class",
            ["method", "route", "status_class"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "truerun_gateway_http_request_duration_seconds",
            "Time from a request's arrival to the end of its response",
            ["method", "route", "status_class"],
            buckets=BUCKETS,
            registry=self.registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "other"  # the caller's choice: bounded here
        self.requests.labels(method, route, status_class(status)).inc()
        self.latency.labels(method, route, status_class(status)).observe(seconds)

    def serve(self, address: str, tls: ServerTls | None = None) -> tuple[Any, int]:
        """An HTTP /metrics endpoint on ``host:port`` (port 0: a free one); HTTPS with
        ``tls``."""
        host, _, port = address.rpartition(":")
        server, _thread = start_http_server(
            int(port),
            addr=host.strip("[]") or "127.0.0.1",
            registry=self.registry,
            certfile=tls.cert_file if tls else None,
            keyfile=tls.key_file if tls else None,
        )
        return server, int(server.server_port)


def route_template(routes: list[Any], scope: Scope) -> str:
    """The template of the route serving ``scope``; a run command names its verb."""
    for route in routes:
        if isinstance(route, Route) and route.matches(scope)[0] is Match.FULL:
            path: str = route.path
            if "{target}" in path:
                _, _, verb = scope["path"].rpartition(":")
                return path.replace(
                    "{target}", f"{{run}}:{verb}" if verb in COMMAND_VERBS else "{target}"
                )
            return path
        if isinstance(route, Mount) and route.matches(scope)[0] is Match.FULL:
            return "static"
    return "unmatched"


class MetricsMiddleware:
    """Wraps the gateway's ASGI app: each request counted, timed and written to the access
    log, its request id bound to its log context and echoed in ``X-Request-Id``. Other
    scopes (lifespan) pass through untouched."""

    def __init__(self, app: ASGIApp, routes: list[Any], metrics: GatewayMetrics) -> None:
        self._app = app
        self._routes = routes
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        sent = 0
        rid = access_log.request_id(scope["headers"])

        async def sending(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [*message.get("headers", ()), (b"x-request-id", rid.encode())]
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            with logs.bound(request_id=rid):
                await self._app(scope, receive, sending)
        finally:
            route = route_template(self._routes, scope)
            seconds = time.perf_counter() - started
            self._metrics.observe(scope["method"], route, status, seconds)
            access_log.write(
                access_log.access_fields(scope["method"], route, status, seconds, sent, rid)
            )
