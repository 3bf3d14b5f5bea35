"""A live stack for gateway tests: the real RunService + CapacityService gRPC server on
127.0.0.1:0 over a real store, and the real gateway (uvicorn) on another loopback port that
reaches the services only over gRPC.

Tokens: ``ALL`` sees every project, ``P_TOKEN`` only ``proj-p``, ``Q_TOKEN`` only ``proj-q``.
The services include ScheduleService and WebhookService (webhook key ``WEBHOOK_KEY``) and
the long-task services; the scheduler loops do not run (a test fires schedules by hand,
backfill or delivery, and starts long-task attempts through the door).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
from truerun.v1 import capacity_service_pb2_grpc, run_service_pb2_grpc, schedule_service_pb2_grpc

from gateway.app import GatewayConfig
from gateway.server import HttpServer
from gateway.tokens import ApiTokens
from kernel.proxies import TrustedProxies
from services.bootstrap import Capacity, Coordinator, long_tasks, schedules
from services.server import start_serving
from tests.support.auth import aio_channel
from tests.support.capacity import open_capacity
from tests.support.schema_templates import migrate

HOST = "127.0.0.1"
ALL = "token-all-projects"
P_TOKEN = "token-project-p"
Q_TOKEN = "token-project-q"
TOKENS = f"{ALL}:*:operator;{P_TOKEN}:proj-p;{Q_TOKEN}:proj-q"
WEBHOOK_KEY = "gateway-stack-webhook-key"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class GatewayStack:
    base_url: str  # http://127.0.0.1:<port>
    grpc_address: str
    database_url: str
    app: Coordinator
    capacity: Capacity
    runs: run_service_pb2_grpc.RunServiceAsyncStub
    capacity_stub: capacity_service_pb2_grpc.CapacityServiceAsyncStub
    schedules: schedule_service_pb2_grpc.ScheduleServiceAsyncStub
    grpc_server: grpc.aio.Server  # to stop the services under a running gateway


@asynccontextmanager
async def gateway_stack(
    database_url: str,
    *,
    heartbeat_s: float = 1.0,
    max_body_bytes: int = 256 * 1024,
    tokens: str = "",
    trusted_proxies: str = "",
    gateway_tokens: str = "",
    vouch_token: str = "",
) -> AsyncIterator[GatewayStack]:
    """``tokens``: more API token entries (ApiTokens.parse) besides TOKENS, for the
    services and the gateway alike; ``trusted_proxies``: TRUERUN_TRUSTED_PROXIES of the
    gateway; ``gateway_tokens``: entries only the gateway holds (the services refuse
    them); ``vouch_token``: the gateway's :service token, vouching for its clients."""
    spec = ";".join(filter(None, [TOKENS, tokens]))
    await migrate(database_url)
    async with open_capacity(database_url) as (app, caps):
        serving = await start_serving(
            app,
            f"{HOST}:0",
            caps,
            tokens=ApiTokens.parse(spec),
            schedules=schedules(app, WEBHOOK_KEY),
            long_tasks=long_tasks(app),
        )
        server = serving.server
        grpc_address = f"{HOST}:{serving.port}"
        http = HttpServer(
            GatewayConfig(
                grpc_target=grpc_address,
                tokens=ApiTokens.parse(";".join(filter(None, [spec, gateway_tokens]))),
                heartbeat_s=heartbeat_s,
                max_body_bytes=max_body_bytes,
                trusted_proxies=TrustedProxies.parse(trusted_proxies),
                vouch_token=vouch_token,
            ),
            f"{HOST}:0",
        )
        try:
            await http.start()
            async with aio_channel(grpc_address, ALL) as channel:
                yield GatewayStack(
                    base_url=f"http://{http.address}",
                    grpc_address=grpc_address,
                    database_url=database_url,
                    app=app,
                    capacity=caps,
                    runs=run_service_pb2_grpc.RunServiceStub(channel),
                    capacity_stub=capacity_service_pb2_grpc.CapacityServiceStub(channel),
                    schedules=schedule_service_pb2_grpc.ScheduleServiceStub(channel),
                    grpc_server=server,
                )
        finally:
            await http.stop()
            await server.stop(None)
