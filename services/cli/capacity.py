"""`truerun capacity`: the CapacityService (observations, occupancy, claims, agents) over the
shared database and Redis. The claim transaction goes through the coordinator's transition
module against the shared database, so replicas never over-commit: the durable rows read
under the claim locks decide, not this process. Stateless: run as many as you like.
"""

from __future__ import annotations

import logging

from coordinator.api.credentials import ApiTokens
from kernel.config import ConfigError, Settings
from kernel.telemetry import configure, server_interceptors
from kernel.tls import server_tls
from services.bootstrap import capacity, coordinator, open_observations, open_store
from services.metrics import CAPACITY_PARTS, Metrics
from services.server import print_listening, start_serving, until_signal

log = logging.getLogger(__name__)


async def run_capacity(settings: Settings) -> None:
    if not settings.redis_url:
        # The in-memory twin is per process: replicas (and coordinators' reports) would not
        # see each other's observations.
        raise ConfigError("truerun capacity needs TRUERUN_REDIS_URL (observations are shared)")
    if not settings.api_tokens:
        raise ConfigError("truerun capacity needs TRUERUN_API_TOKENS (every call authenticates)")
    tls = server_tls(settings)
    telemetry = configure("truerun-capacity", settings.otel_exporter, settings.otel_endpoint)
    store = await open_store(settings.resolved_database_url())
    try:
        metrics = Metrics(parts=CAPACITY_PARTS)
        app = coordinator(store, metrics)
        observations = await open_observations(settings.redis_url)
        caps = capacity(app, observations, settings.observation_ttl_ms)
        serving = await start_serving(
            app,
            settings.grpc_addr,
            caps,
            run_service=False,
            interceptors=server_interceptors(),
            tokens=ApiTokens.parse(settings.api_tokens),
            tls=tls,
            rpc_metrics=metrics.rpc,
        )
        metrics_server, metrics_port = metrics.serve(settings.metrics_addr, tls)
        print_listening(settings, metrics_port, serving.port, tls)
        await until_signal()
        log.info("draining; up to %.1fs", settings.grace_seconds)
        await serving.shutdown(settings.grace_seconds)
        metrics_server.shutdown()
        metrics_server.server_close()
        await observations.close()
        print("capacity stopped", flush=True)
    finally:
        await store.close()
        telemetry.shutdown()
