"""The gateway: REST + Server-Sent Events over the gRPC API, and the dashboard's static files.

It holds no state and reads no database: every answer comes from RunService or
CapacityService over gRPC. A token sees only its projects; a run of another project answers
404 exactly like a missing run (same status, reason and detail), lists and streams of another
project are empty.

This module is the wiring: the configuration, the upstream channels (opened by the lifespan),
tracing, the route table (gateway/routes: the handlers, one module per resource) and the
static files.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gateway.catch_all import CatchAll
from gateway.routes import ROUTES
from gateway.routes.common import Context
from gateway.routes.meta import http_error
from gateway.tokens import ApiTokens, FailureLimit
from gateway.tracing import TracingMiddleware
from gateway.upstream import Upstream
from kernel.proxies import TrustedProxies
from kernel.tls import TlsFiles

HERE = Path(__file__).resolve().parent
OPENAPI_PATH = HERE / "openapi.json"
STATIC_DIR = HERE / "static"
MAX_BODY_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    grpc_target: str
    tokens: ApiTokens
    # CapacityService's address when it is served apart (`truerun capacity`); "" = grpc_target.
    capacity_target: str = ""
    max_body_bytes: int = MAX_BODY_BYTES
    heartbeat_s: float = 15.0
    static_dir: Path | None = STATIC_DIR
    failures: FailureLimit | None = None  # failed authentications per client (429 past it)
    # Whose X-Forwarded-For / Forwarded is believed (TRUERUN_TRUSTED_PROXIES): none by default.
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)
    # A :service token of the services: the calls then vouch for the client's address
    # (docs/gateway.md "Client addresses"); "" = they do not.
    vouch_token: str = ""
    # TLS to the services: an https:// target or any of these files (kernel/tls.py)
    tls: TlsFiles = field(default_factory=TlsFiles)


def create_app(config: GatewayConfig) -> Starlette:
    """The app serving ``ROUTES``; the handlers find ``Context`` on ``app.state.gateway``."""
    context = Context(
        tokens=config.tokens,
        failures=config.failures or FailureLimit(),
        trusted_proxies=config.trusted_proxies,
        max_body_bytes=config.max_body_bytes,
        heartbeat_s=config.heartbeat_s,
        openapi=OPENAPI_PATH.read_bytes(),
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        upstream = Upstream(
            config.grpc_target, config.capacity_target, config.tls, config.vouch_token
        )
        context.upstream = upstream
        try:
            yield
        finally:
            await upstream.close()

    routes: list[Route | Mount] = [
        Route(entry.path, entry.handler, methods=[entry.method]) for entry in ROUTES
    ]
    if config.static_dir is not None and config.static_dir.is_dir():
        routes.append(Mount("/", StaticFiles(directory=config.static_dir, html=True)))
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
        middleware=[Middleware(CatchAll), Middleware(TracingMiddleware, routes=routes)],
    )
    app.state.gateway = context
    return app
