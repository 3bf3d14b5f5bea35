"""Serve the gateway with uvicorn on a socket bound first, so port 0 yields a known port.

The processes that run it (``truerun gateway``, ``truerun dev``) are in services/cli/."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator

import uvicorn

from gateway.app import GatewayConfig, create_app
from gateway.metrics import GatewayMetrics, MetricsMiddleware
from kernel.tls import ServerTls

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
                # uvicorn's own records go to the process's handler (JSON or text, redacted:
                # services/log_setup.py), not to a handler of its own; gateway/access_log.py
                # writes the access lines.
                log_config=None,
                access_log=False,
                lifespan="on",
                # X-Forwarded-For / Forwarded are the gateway's to believe, only from
                # TRUERUN_TRUSTED_PROXIES (kernel/proxies.py): uvicorn's own reading trusts
                # any loopback peer, so request.client stays the peer.
                proxy_headers=False,
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
