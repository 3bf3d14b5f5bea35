"""`truerun dev`: every service in one process on SQLite in a data directory."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import replace

from coordinator.dispatch.retries import RetryScheduler
from coordinator.dispatch.tokens import ANY_OWNER, RuntimeTokens, token_hash
from gateway.app import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.server import HttpServer
from gateway.tokens import ApiTokens
from kernel.config import ConfigError, Settings
from kernel.db.migrate import upgrade
from kernel.ids import new_token
from kernel.tls import (
    DEV_PLAINTEXT,
    ServerTls,
    TlsFiles,
    checked_target,
    client_files,
    listening,
    require_loopback,
    server_tls,
)
from reconciler.leases import LeaseReconciler
from reconciler.output_retention import OutputRetention
from services.bootstrap import (
    broken_references,
    capacity,
    coordinator,
    long_task_retention,
    long_task_watcher,
    long_tasks,
    notice_delivery,
    open_observations,
    open_store,
    output_policy,
    runtimes,
    schedule_event_retention,
    scheduler,
    schedules,
)
from services.cli.gateway import api_tokens, trusted_proxies
from services.metrics import Metrics
from services.server import start_serving, until_signal

log = logging.getLogger(__name__)


async def run_dev(settings: Settings) -> None:
    tls = server_tls(settings)
    if tls is None:
        require_loopback(settings, "truerun dev")
    else:
        checked_target("127.0.0.1", dev_upstream_tls(settings, tls))  # before anything opens
    # tokens and the database live here: the data dir is the user's alone (0700, files 0600)
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(settings.data_dir, 0o700)
    database_url = settings.resolved_database_url()
    await upgrade(database_url)
    store = await open_store(database_url)
    for database_file in settings.data_dir.glob("truerun.db*"):
        os.chmod(database_file, 0o600)
    try:
        metrics = Metrics()
        app = coordinator(store, metrics, output=output_policy(settings))
        observations = await open_observations(settings.redis_url)
        caps = capacity(app, observations, settings.observation_ttl_ms)
        runtime_side = runtimes(
            app,
            caps,
            _runtime_tokens(settings),
            cancel_grace_ms=settings.cancel_grace_ms,
            start_timeout_s=settings.start_timeout_ms / 1000,
            lease_ttl_ms=settings.lease_ttl_ms,
            max_recoveries=settings.max_recoveries,
            claim_gather_ms=settings.claim_gather_ms,
        )
        metrics.count_refusals(runtime_side.sessions.refused)
        tokens, _ = api_tokens(settings, dev=True)
        # The embedded gateway's own :service token, this process's alone (never written):
        # its calls vouch for each client's address, so that the failures the services
        # count are the clients', never one source 127.0.0.1 (docs/gateway.md "Client
        # addresses").
        vouch_token = new_token("gw")
        serving = await start_serving(
            app,
            settings.grpc_addr,
            caps,
            runtime_side,
            tokens=tokens.joined(ApiTokens.parse(f"gateway={vouch_token}:*:service")),
            tls=tls,
            schedules=schedules(app, _webhook_key(settings)),
            long_tasks=long_tasks(app, metrics=metrics),
            long_task_max_unfinished=settings.long_task_owner_max_unfinished,
            notice_webhook_key=_webhook_key(settings),
            notice_webhook_allow=settings.notice_webhook_allow,
            rpc_metrics=metrics.rpc,
        )
        lease_scan = LeaseReconciler(
            app.transitions,
            interval_s=min(2.0, settings.lease_ttl_ms / 4000),
            on_action=lambda outcome: metrics.reconciles.labels("lease", outcome).inc(),
            lost_after_ms=settings.lost_after_ms,
            no_output_cancel_after_ms=settings.no_output_cancel_after_ms,
            max_recoveries=settings.max_recoveries,
        )
        loops = [
            asyncio.create_task(RetryScheduler(app.transitions).serve()),
            asyncio.create_task(scheduler(app, "dev", metrics=metrics).serve()),
            asyncio.create_task(
                long_task_watcher(
                    app, "dev", settings.long_task_owner_concurrency, metrics=metrics
                ).serve()
            ),
            asyncio.create_task(lease_scan.serve()),
            # Notices: the outbox posted to the owners' webhooks (docs/long-tasks.md "Notices").
            asyncio.create_task(
                notice_delivery(
                    app,
                    _webhook_key(settings),
                    settings.notice_max_deliveries,
                    settings.notice_retry_base_ms,
                    metrics=metrics,
                    webhook_allow=settings.notice_webhook_allow,
                ).serve()
            ),
            asyncio.create_task(
                metrics.watch_ages(store, settings.metrics_scan_interval_ms / 1000)
            ),
            asyncio.create_task(
                schedule_event_retention(app, settings.schedule_event_retention_days).serve()
            ),
            asyncio.create_task(
                OutputRetention(app.transitions, settings.output_retention_days).serve()
            ),
            # Long tasks: broken evidence references marked once at start; retention by
            # terminality (docs/long-tasks.md "Retention and export").
            asyncio.create_task(broken_references(app).run_once()),
            asyncio.create_task(
                long_task_retention(app, settings.long_task_retention_days).serve()
            ),
        ]
        metrics_server, metrics_port = metrics.serve(settings.metrics_addr, tls)
        metrics_host = settings.metrics_addr.rsplit(":", 1)[0]
        print(listening("metrics", f"{metrics_host}:{metrics_port}", tls), flush=True)
        host = settings.grpc_addr.rsplit(":", 1)[0]
        print(listening("grpc", f"{host}:{serving.port}", tls), flush=True)
        if tls is None:
            print(DEV_PLAINTEXT, flush=True)
        # the union: the gateway's families on this process's one registry
        gateway_metrics = GatewayMetrics(metrics.registry)
        gateway = await start_dev_gateway(
            settings, serving.port, tls, gateway_metrics, vouch_token=vouch_token
        )
        await until_signal()
        await gateway.stop()  # first: its streams hold gRPC watches open
        await serving.shutdown(settings.grace_seconds)
        for loop in loops:
            loop.cancel()
        metrics_server.shutdown()
        metrics_server.server_close()
    finally:
        await store.close()


def _runtime_tokens(settings: Settings) -> RuntimeTokens:
    """Configured tokens, or for the embedded mode one token for any owner, kept in the data
    directory (mode 0600) so a local `truerun agent` can read it."""
    if settings.runtime_tokens:
        return RuntimeTokens.parse(settings.runtime_tokens)
    path = settings.data_dir / "runtime.token"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(new_token("rt"))
    return RuntimeTokens({token_hash(path.read_text().strip()): ANY_OWNER})


def _webhook_key(settings: Settings) -> str:
    """The configured key, or for the embedded mode one kept in the data directory (0600)."""
    if settings.webhook_key:
        return settings.webhook_key
    path = settings.data_dir / "webhook.key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(new_token("whk"))
    return path.read_text().strip()


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
    settings: Settings,
    grpc_port: int,
    tls: ServerTls | None = None,
    metrics: GatewayMetrics | None = None,
    *,
    vouch_token: str = "",
) -> HttpServer:
    """The gateway inside `truerun dev`, calling this process's own gRPC port (still only over
    gRPC, over TLS when that port serves it). Prints `http listening on HOST:PORT` and the
    dashboard link with its token."""
    tokens, token = api_tokens(settings, dev=True)
    config = GatewayConfig(
        grpc_target=f"127.0.0.1:{grpc_port}",
        tokens=tokens,
        tls=dev_upstream_tls(settings, tls),
        trusted_proxies=trusted_proxies(settings),
        vouch_token=vouch_token,
    )
    server = HttpServer(config, settings.http_addr, metrics, tls)
    await server.start()
    print(listening("http", server.address, tls), flush=True)
    print(f"dashboard {dashboard_url(server.address, token, server.scheme)}", flush=True)
    return server
