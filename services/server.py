"""gRPC server bootstrap: build it (tests bind 127.0.0.1:0), then serve until a signal."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import symbol_database
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from truerun.v1 import (
    capacity_service_pb2,
    long_task_service_pb2,
    run_service_pb2,
    runtime_service_pb2,
    schedule_service_pb2,
)

from automations.api.servicer import ScheduleServicer, WebhookServicer
from automations.service.schedules import Schedules
from capacity.api.servicer import CapacityServicer
from coordinator.api.auth import BearerAuth
from coordinator.api.credentials import ApiTokens, FailureLimit
from coordinator.api.run_servicer import RunServicer
from coordinator.api.runtime_servicer import RuntimeServicer
from kernel.config import Settings
from kernel.tls import PLAINTEXT, ServerTls, listening
from longtasks.api.attempts import LongTaskAttemptServicer
from longtasks.api.people import LongTaskServicer
from longtasks.api.promotion import RunPromotionServicer
from longtasks.service.door import LongTaskDoor
from longtasks.service.reads import TaskReads
from services.bootstrap import (
    Capacity,
    Coordinator,
    Runtimes,
    evidence_reader,
    longtask_watcher_sql,
    notice_desk,
)
from services.listen import ListenError
from services.rpc_metrics import RpcMetrics

log = logging.getLogger(__name__)

KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    # Runtime agents ping idle streams (to notice a dead server fast); accept that.
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.max_receive_message_length", 4 * 1024 * 1024),
]

#: gRPC binds with SO_REUSEPORT by default: a second server on a port already in use would
#: start too and take half of its new connections (a replica started twice, or on another
#: service's port, answering UNIMPLEMENTED or serving stale state). One process per port:
#: the second fails to start with "cannot listen on ...".
BIND_OPTIONS = [("grpc.so_reuseport", 0)]

_HANDLER_KINDS: dict[tuple[bool, bool], Any] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def _deterministic(message: Message) -> bytes:
    return message.SerializeToString(deterministic=True)


def add_deterministic(
    server: grpc.aio.Server, service: ServiceDescriptor, servicer: object
) -> None:
    """Register a servicer whose responses serialize deterministically: map entries (Struct
    fields) come out in one order in every process, so an AIP-155 replay answered by another
    replica is byte-identical to the first answer."""
    handlers = {}
    for method in service.methods:
        request_type = symbol_database.Default().GetSymbol(method.input_type.full_name)
        behaviour = getattr(servicer, method.name)
        make = _HANDLER_KINDS[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            behaviour,
            request_deserializer=request_type.FromString,
            response_serializer=_deterministic,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )


@dataclass
class Serving:
    """A started server, its health service and the runtime streams it holds."""

    server: grpc.aio.Server
    port: int
    health: health_aio.HealthServicer
    runtime: RuntimeServicer | None

    async def shutdown(self, grace_seconds: float) -> None:
        """Graceful shutdown: every health status NOT_SERVING, no new calls (clients and
        runtimes go to another replica), runtime streams drained (see RuntimeServicer.drain),
        calls in flight finished, all within ``grace_seconds``; whatever is still open then
        is cancelled (a runtime resends its unacknowledged events elsewhere)."""
        await self.health.enter_graceful_shutdown()
        stopping = asyncio.create_task(self.server.stop(grace_seconds))
        if self.runtime is not None:
            try:
                await asyncio.wait_for(self.runtime.drain(), grace_seconds)
            except TimeoutError:
                log.warning("runtime streams not drained within %.1fs", grace_seconds)
        await stopping


async def create_server(
    app: Coordinator,
    address: str,
    capacity: Capacity | None = None,
    runtimes: Runtimes | None = None,
    *,
    tokens: ApiTokens | None,
) -> tuple[grpc.aio.Server, int]:
    serving = await start_serving(app, address, capacity, runtimes, tokens=tokens)
    return serving.server, serving.port


async def start_serving(
    app: Coordinator,
    address: str,
    capacity: Capacity | None = None,
    runtimes: Runtimes | None = None,
    *,
    run_service: bool = True,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    tokens: ApiTokens | None,
    failures: FailureLimit | None = None,
    tls: ServerTls | None = None,
    schedules: Schedules | None = None,
    long_tasks: LongTaskDoor | None = None,
    long_task_max_unfinished: int = 0,
    notice_webhook_key: str = "",
    notice_webhook_allow: str = "",
    rpc_metrics: RpcMetrics | None = None,
) -> Serving:
    """Serve RunService (unless ``run_service`` is False), CapacityService when ``capacity``
    is given, RuntimeService when ``runtimes`` is, plus health and reflection. RunService and
    CapacityService authenticate every call with ``tokens`` (coordinator/api/auth.py): a
    server that serves either needs them. With ``tls`` the port serves TLS only (and mTLS
    when it names a client CA); without, plaintext. ``schedules``: ScheduleService (token
    auth) and WebhookService (signature auth) too; ``long_tasks``: LongTaskService (token
    auth), LongTaskAttemptService and RunPromotionService (each call's callback token); an
    owner may keep ``long_task_max_unfinished`` unfinished long tasks (0 = no cap); the
    owners' notice webhooks sign with secrets derived from ``notice_webhook_key`` (empty:
    none register), to URLs ``notice_webhook_allow`` allows (TRUERUN_NOTICE_WEBHOOK_ALLOW);
    ``rpc_metrics`` counts and times every call (services/rpc_metrics.py)."""
    needs_tokens = capacity is not None or schedules is not None or long_tasks is not None
    if (run_service or needs_tokens) and tokens is None:
        raise ValueError("RunService and CapacityService need API tokens to authenticate")
    chain = list(interceptors)
    if tokens is not None:
        chain.insert(0, BearerAuth(tokens, failures))
    if rpc_metrics is not None:  # outermost: refused calls (UNAUTHENTICATED) count too
        chain.insert(0, rpc_metrics.interceptor())
    server = grpc.aio.server(options=[*KEEPALIVE_OPTIONS, *BIND_OPTIONS], interceptors=chain)
    served = []
    # What runtimes this process serves may take: creates outside it are refused.
    bindings = runtimes.tokens if runtimes is not None else None
    if run_service:
        descriptor = run_service_pb2.DESCRIPTOR.services_by_name["RunService"]
        servicer = RunServicer(app.transitions, app.queries, app.hub, bindings)
        add_deterministic(server, descriptor, servicer)
        served.append(descriptor.full_name)
    if capacity is not None:
        capacity_service = capacity_service_pb2.DESCRIPTOR.services_by_name["CapacityService"]
        capacity_servicer = CapacityServicer(
            app.store, capacity.claims, capacity.reports, capacity.agents
        )
        add_deterministic(server, capacity_service, capacity_servicer)
        served.append(capacity_service.full_name)
    if schedules is not None:
        for name, handler in (
            ("ScheduleService", ScheduleServicer(schedules, bindings)),
            ("WebhookService", WebhookServicer(schedules)),
        ):
            descriptor = schedule_service_pb2.DESCRIPTOR.services_by_name[name]
            add_deterministic(server, descriptor, handler)
            served.append(descriptor.full_name)
    if long_tasks is not None:
        reads = TaskReads(longtask_watcher_sql(app.store))
        long_task_servicers: tuple[tuple[str, object], ...] = (
            (
                "LongTaskService",
                LongTaskServicer(
                    long_tasks,
                    reads,
                    long_task_max_unfinished,
                    notice_desk(app, notice_webhook_key, notice_webhook_allow),
                    bindings,
                ),
            ),
            (
                "LongTaskAttemptService",
                LongTaskAttemptServicer(long_tasks, reads, app.store, evidence_reader(app)),
            ),
            (
                "RunPromotionService",
                RunPromotionServicer(long_tasks, reads, app.store, long_task_max_unfinished),
            ),
        )
        for name, long_task_servicer in long_task_servicers:
            descriptor = long_task_service_pb2.DESCRIPTOR.services_by_name[name]
            add_deterministic(server, descriptor, long_task_servicer)
            served.append(descriptor.full_name)
    runtime_servicer = None
    if runtimes is not None:
        runtime_service = runtime_service_pb2.DESCRIPTOR.services_by_name["RuntimeService"]
        runtime_servicer = RuntimeServicer(
            runtimes.tokens,
            runtimes.sessions,
            runtimes.ingest,
            runtimes.dispatcher,
            runtimes.observations,
            app.transitions,
        )
        add_deterministic(server, runtime_service, runtime_servicer)
        served.append(runtime_service.full_name)
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*served, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, tls.grpc_credentials())
    except RuntimeError:  # grpc's "Failed to bind" (a port in use, an address not ours)
        port = 0
    if port == 0:
        raise ListenError(f"cannot listen on {address}: in use, or not an address of this host")
    await server.start()
    for name in ["", *served]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return Serving(server, port, health_servicer, runtime_servicer)


def host_of(address: str) -> str:
    """The host part of host:port (for the "... listening on host:port" lines)."""
    return address.rsplit(":", 1)[0]


def print_listening(
    settings: Settings, metrics_port: int, grpc_port: int, tls: ServerTls | None
) -> None:
    """The startup lines of a production gRPC process: where metrics and gRPC listen and
    whether they serve TLS (a plaintext process says so on a line of its own)."""
    metrics = f"{host_of(settings.metrics_addr)}:{metrics_port}"
    print(listening("metrics", metrics, tls), flush=True)
    print(listening("grpc", f"{host_of(settings.grpc_addr)}:{grpc_port}", tls), flush=True)
    if tls is None:
        print(PLAINTEXT, flush=True)


async def until_signal() -> None:
    """Returns at the first SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def serve_until_signal(server: grpc.aio.Server, grace_seconds: float) -> None:
    await until_signal()
    log.info("shutting down; waiting up to %.0fs for calls in flight", grace_seconds)
    await server.stop(grace_seconds)
