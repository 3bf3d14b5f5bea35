"""`truerun coordinator`: RunService, RuntimeService (runtime streams, the dispatcher) and the
retry scheduler, over the shared database; claims and capacity observations go to the
capacity service over gRPC (TRUERUN_CAPACITY_ADDR). Stateless: run as many as you like.

SIGTERM: health NOT_SERVING, no new calls, the runtime streams drained (see
RuntimeServicer.drain), then exit, all within TRUERUN_GRACE_SECONDS.
"""

from __future__ import annotations

import asyncio
import logging

from capacity.client import CapacityClient
from coordinator.api.bearer import bearer_interceptors
from coordinator.api.credentials import ApiTokens
from coordinator.dispatch.retries import RetryScheduler
from coordinator.dispatch.tokens import RuntimeTokens
from kernel.config import ConfigError, Settings
from kernel.telemetry import client_interceptors, configure, server_interceptors
from kernel.tls import checked_target, client_files, server_tls
from services.bootstrap import (
    coordinator,
    long_tasks,
    open_store,
    output_policy,
    remote_runtimes,
    schedules,
)
from services.metrics import COORDINATOR_PARTS, Metrics
from services.server import print_listening, start_serving, until_signal

log = logging.getLogger(__name__)


async def run_coordinator(settings: Settings) -> None:
    if not settings.capacity_addr:
        raise ConfigError("truerun coordinator needs TRUERUN_CAPACITY_ADDR (the capacity service)")
    if not settings.runtime_tokens:
        raise ConfigError("truerun coordinator needs TRUERUN_RUNTIME_TOKENS (owner:token;...)")
    if not settings.api_tokens:
        raise ConfigError("truerun coordinator needs TRUERUN_API_TOKENS (every call authenticates)")
    if not settings.service_token:
        raise ConfigError(
            "truerun coordinator needs TRUERUN_SERVICE_TOKEN (an API token the capacity "
            "service accepts)"
        )
    tls = server_tls(settings)
    capacity_tls = client_files(settings)
    checked_target(settings.capacity_addr, capacity_tls)  # a bad file stops it before it opens
    telemetry = configure("truerun-coordinator", settings.otel_exporter, settings.otel_endpoint)
    store = await open_store(settings.resolved_database_url())
    capacity = CapacityClient(
        settings.capacity_addr,
        settings.observation_ttl_ms,
        interceptors=[*bearer_interceptors(settings.service_token), *client_interceptors()],
        tls=capacity_tls,
    )
    try:
        metrics = Metrics(parts=COORDINATOR_PARTS)
        app = coordinator(store, metrics, output=output_policy(settings))
        side = remote_runtimes(
            app,
            capacity,
            capacity,
            RuntimeTokens.parse(settings.runtime_tokens),
            cancel_grace_ms=settings.cancel_grace_ms,
            start_timeout_s=settings.start_timeout_ms / 1000,
            lease_ttl_ms=settings.lease_ttl_ms,
            max_recoveries=settings.max_recoveries,
            claim_gather_ms=settings.claim_gather_ms,
        )
        metrics.count_refusals(side.sessions.refused)
        serving = await start_serving(
            app,
            settings.grpc_addr,
            runtimes=side,
            interceptors=server_interceptors(),
            tokens=ApiTokens.parse(settings.api_tokens),
            tls=tls,
            schedules=schedules(app, settings.webhook_key),
            long_tasks=long_tasks(app, metrics=metrics),
            long_task_max_unfinished=settings.long_task_owner_max_unfinished,
            notice_webhook_key=settings.webhook_key,
            notice_webhook_allow=settings.notice_webhook_allow,
            rpc_metrics=metrics.rpc,
        )
        loops = [
            asyncio.create_task(RetryScheduler(app.transitions).serve()),
            asyncio.create_task(
                metrics.watch_ages(store, settings.metrics_scan_interval_ms / 1000)
            ),
        ]
        metrics_server, metrics_port = metrics.serve(settings.metrics_addr, tls)
        print_listening(settings, metrics_port, serving.port, tls)
        await until_signal()
        log.info("draining; up to %.1fs", settings.grace_seconds)
        await serving.shutdown(settings.grace_seconds)
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await side.dispatcher.stop()
        metrics_server.shutdown()
        metrics_server.server_close()
        print("coordinator stopped", flush=True)
    finally:
        await capacity.close()
        await store.close()
        telemetry.shutdown()
