"""Serve the gateway with uvicorn on a socket bound first, so port 0 yields a known port."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import signal
import socket
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path

import uvicorn

from gateway.app import GatewayConfig, create_app
from gateway.metrics import GatewayMetrics, MetricsMiddleware
from gateway.tokens import ALL_PROJECTS, ApiTokens
from kernel.config import ConfigError, Settings
from kernel.ids import new_token
from kernel.telemetry import configure
from kernel.tls import (
    PLAINTEXT,
    ServerTls,
    TlsFiles,
    checked_target,
    client_files,
    listening,
    server_tls,
)

log = logging.getLogger(__name__)


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The process owns SIGTERM/SIGINT (graceful shutdown of every service it runs); uvicorn
        # must not replace those handlers.
        yield


class HttpServer:
    """A started gateway: ``port`` is bound; ``stop()`` ends streams and closes the socket.
    With ``metrics``, every request is counted and timed (gateway.metrics); with ``tls`` it
    serves HTTPS only."""

    def __init__(
        self,
        config: GatewayConfig,
        http_addr: str,
        metrics: GatewayMetrics | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        host, _, port = http_addr.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, int(port)))
        self._socket.listen(128)
        self._socket.setblocking(False)
        self.host = host
        self.port = int(self._socket.getsockname()[1])
        self.tls = tls
        app = create_app(config)
        asgi = app if metrics is None else MetricsMiddleware(app, app.routes, metrics)
        self._server = _Uvicorn(
            uvicorn.Config(
                asgi,
                log_level="warning",
                access_log=False,
                lifespan="on",
                # Open SSE streams must not hold a shutdown for long: they resume anyway.
                timeout_graceful_shutdown=1,
                ssl_certfile=tls.cert_file if tls else None,
                ssl_keyfile=tls.key_file if tls else None,
            )
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started:
            if self._task.done():
                await self._task  # raises what stopped it
                raise RuntimeError("the HTTP server stopped before it started")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._socket.close()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


def api_tokens(settings: Settings, *, dev: bool) -> tuple[ApiTokens, str | None]:
    """The configured tokens; in `truerun dev` without any, one all-projects operator token
    kept in DATA_DIR/api.token (mode 0600), which is also returned so the dashboard link can
    carry it. `truerun dev` serves gRPC with the same tokens."""
    if settings.api_tokens:
        return ApiTokens.parse(settings.api_tokens), None
    if not dev:
        raise SystemExit("truerun gateway needs TRUERUN_API_TOKENS (or TRUERUN_API_TOKENS_FILE)")
    path: Path = settings.data_dir / "api.token"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(new_token("api"))
    token = path.read_text().strip()
    # the one user of the embedded mode: every project, the operator commands, their name
    return ApiTokens.parse(f"{_user()}={token}:{ALL_PROJECTS}:operator"), token


def _user() -> str:
    try:
        return getpass.getuser() or "dev"
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return "dev"


def dashboard_url(address: str, token: str | None, scheme: str = "http") -> str:
    return f"{scheme}://{address}/" + (f"#token={token}" if token else "")


def dev_upstream_tls(settings: Settings, tls: ServerTls | None) -> TlsFiles:
    """How `truerun dev`'s gateway reaches its own gRPC port: plaintext when the port is,
    else verifying it with TRUERUN_TLS_CA_FILE (default: the server certificate itself, which
    suits a self-signed one) and, when gRPC asks for client certificates, presenting
    TRUERUN_TLS_CLIENT_CERT_FILE."""
    if tls is None:
        return TlsFiles()
    if tls.client_ca is not None and not settings.tls_client_cert_file:
        raise ConfigError(
            "truerun dev with TRUERUN_TLS_CLIENT_CA_FILE (mTLS) needs "
            "TRUERUN_TLS_CLIENT_CERT_FILE and TRUERUN_TLS_CLIENT_KEY_FILE: its gateway is a "
            "gRPC client of its own port"
        )
    files = client_files(settings)
    return replace(files, ca_file=files.ca_file or tls.cert_file)


async def start_dev_gateway(
    settings: Settings, grpc_port: int, tls: ServerTls | None = None
) -> HttpServer:
    """The gateway inside `truerun dev`, calling this process's own gRPC port (still only over
    gRPC, over TLS when that port serves it). Prints `http listening on HOST:PORT` and the
    dashboard link with its token."""
    tokens, token = api_tokens(settings, dev=True)
    config = GatewayConfig(
        grpc_target=f"127.0.0.1:{grpc_port}",
        tokens=tokens,
        tls=dev_upstream_tls(settings, tls),
    )
    server = HttpServer(config, settings.http_addr, tls=tls)
    await server.start()
    print(listening("http", server.address, tls), flush=True)
    print(f"dashboard {dashboard_url(server.address, token, server.scheme)}", flush=True)
    return server


async def run_gateway(settings: Settings) -> None:
    """`truerun gateway`: the gateway alone, in front of the services at settings.services_addr
    (CapacityService at settings.capacity_addr when set)."""
    tokens, _ = api_tokens(settings, dev=False)
    tls = server_tls(settings)
    upstream = client_files(settings)
    for target in filter(None, (settings.services_addr, settings.capacity_addr)):
        checked_target(target, upstream)  # a bad TLS file stops the gateway here, not per call
    metrics = GatewayMetrics()
    telemetry = configure("truerun-gateway", settings.otel_exporter, settings.otel_endpoint)
    server = HttpServer(
        GatewayConfig(
            grpc_target=settings.services_addr,
            capacity_target=settings.capacity_addr,
            tokens=tokens,
            tls=upstream,
        ),
        settings.http_addr,
        metrics,
        tls,
    )
    await server.start()
    metrics_server, metrics_port = metrics.serve(settings.metrics_addr, tls)
    metrics_host = settings.metrics_addr.rpartition(":")[0].strip("[]") or "127.0.0.1"
    print(listening("metrics", f"{metrics_host}:{metrics_port}", tls), flush=True)
    print(listening("http", server.address, tls), flush=True)
    if tls is None:
        print(PLAINTEXT, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    metrics_server.shutdown()
    metrics_server.server_close()
    telemetry.shutdown()
