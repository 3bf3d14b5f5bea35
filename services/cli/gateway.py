"""`truerun gateway`: the REST/SSE gateway and the dashboard as their own process, in front
of the services' gRPC (gateway/ is the gateway itself; this is the process around it: its
settings, its API tokens, TLS, telemetry, the metrics port, serving until a signal)."""

from __future__ import annotations

import getpass
from pathlib import Path

from gateway.app import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.server import HttpServer
from gateway.tokens import ALL_PROJECTS, ApiTokens
from kernel.config import ConfigError, Settings
from kernel.ids import new_token
from kernel.proxies import TrustedProxies
from kernel.telemetry import configure
from kernel.tls import PLAINTEXT, checked_target, client_files, listening, server_tls
from services.server import until_signal


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


def trusted_proxies(settings: Settings) -> TrustedProxies:
    try:
        return TrustedProxies.parse(settings.trusted_proxies)
    except ValueError as error:
        raise ConfigError(f"TRUERUN_TRUSTED_PROXIES: {error}") from None


def _user() -> str:
    try:
        return getpass.getuser() or "dev"
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return "dev"


async def run_gateway(settings: Settings) -> None:
    """The gateway alone, in front of the services at settings.services_addr (CapacityService
    at settings.capacity_addr when set), until SIGINT or SIGTERM."""
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
            trusted_proxies=trusted_proxies(settings),
            # With TRUERUN_SERVICE_TOKEN the calls vouch for each client's address
            # (docs/gateway.md "Client addresses").
            vouch_token=settings.service_token,
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
    await until_signal()
    await server.stop()
    metrics_server.shutdown()
    metrics_server.server_close()
    telemetry.shutdown()
