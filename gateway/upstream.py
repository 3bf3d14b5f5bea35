"""The gateway's gRPC stubs, the token the calls made for a request carry, and the address
of the client they are made for (docs/gateway.md "Client addresses")."""

from __future__ import annotations

from contextvars import ContextVar

from truerun.v1 import (
    capacity_service_pb2_grpc,
    long_task_service_pb2_grpc,
    run_service_pb2_grpc,
    schedule_service_pb2_grpc,
)

from coordinator.api.auth import CLIENT_METADATA, GATEWAY_METADATA
from coordinator.api.bearer import bearer_interceptors
from kernel.telemetry import client_interceptors
from kernel.tls import TlsFiles, aio_channel

#: The bearer token of the request being served: what the gRPC calls made for it carry.
FORWARDED: ContextVar[str] = ContextVar("gateway_forwarded_token", default="")
#: The address of the request's client (kernel/proxies.py): what the calls vouch for.
CLIENT: ContextVar[str] = ContextVar("gateway_client_address", default="")


class Upstream:
    """The gRPC stubs, on channels opened inside the server's event loop: one, or a second
    one for CapacityService when it has its own address. RunService, ScheduleService,
    WebhookService and LongTaskService are on the services address (`truerun coordinator`,
    `truerun dev`)."""

    def __init__(
        self,
        target: str,
        capacity_target: str = "",
        tls: TlsFiles | None = None,
        vouch_token: str = "",
    ) -> None:
        # Every call carries the token of the request it serves: the gateway forwards the
        # caller's identity and grants none of its own. With ``vouch_token`` (a :service
        # token of the services) it also says which client the call is for, so that a
        # failure the services count is the client's, not the gateway's one address.
        def vouching() -> list[tuple[str, str]]:
            client = CLIENT.get()
            if not vouch_token or not client:
                return []
            return [(GATEWAY_METADATA, vouch_token), (CLIENT_METADATA, client)]

        interceptors = [*bearer_interceptors(FORWARDED.get, vouching), *client_interceptors()]
        files = tls or TlsFiles()
        self.channel = aio_channel(target, files, interceptors=interceptors)
        self.capacity_channel = self.channel
        if capacity_target and capacity_target != target:
            self.capacity_channel = aio_channel(capacity_target, files, interceptors=interceptors)
        self.runs = run_service_pb2_grpc.RunServiceStub(self.channel)
        self.capacity = capacity_service_pb2_grpc.CapacityServiceStub(self.capacity_channel)
        self.schedules = schedule_service_pb2_grpc.ScheduleServiceStub(self.channel)
        self.long_tasks = long_task_service_pb2_grpc.LongTaskServiceStub(self.channel)
        # Deliveries carry no token (FORWARDED is empty for them): the signature is checked.
        self.webhooks = schedule_service_pb2_grpc.WebhookServiceStub(self.channel)

    async def close(self) -> None:
        await self.channel.close(None)
        if self.capacity_channel is not self.channel:
            await self.capacity_channel.close(None)
