"""A live coordinator + capacity + runtime-protocol server on loopback, over a real store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from truerun.v1 import (
    capacity_service_pb2_grpc,
    run_service_pb2_grpc,
    runtime_service_pb2_grpc,
)

from capacity.observations.memory import MemoryObservationStore
from coordinator.dispatch.tokens import ANY_OWNER, RuntimeTokens, token_hash
from coordinator.domain.output import DEFAULT_OUTPUT_POLICY, OutputPolicy
from kernel.ids import now_ms
from services.bootstrap import (
    Capacity,
    Coordinator,
    Runtimes,
    capacity,
    coordinator,
    open_store,
    runtimes,
)
from services.server import create_server
from tests.support.auth import aio_channel, server_tokens
from tests.support.schema_templates import migrate

if TYPE_CHECKING:
    from truerun.v1.capacity_service_pb2_grpc import CapacityServiceAsyncStub
    from truerun.v1.run_service_pb2_grpc import RunServiceAsyncStub
    from truerun.v1.runtime_service_pb2_grpc import RuntimeServiceAsyncStub

RUNTIME_TOKEN = "test-runtime-token"


@dataclass
class Stack:
    app: Coordinator
    caps: Capacity
    runtimes: Runtimes
    address: str
    runs: RunServiceAsyncStub
    capacity: CapacityServiceAsyncStub
    runtime: RuntimeServiceAsyncStub


@contextlib.asynccontextmanager
async def runtime_stack(
    database_url: str,
    start_timeout_s: float = 10.0,
    lease_ttl_ms: int = 30_000,
    owners_by_token: Mapping[str, str] | None = None,
    clock: Callable[[], int] = now_ms,
    output: OutputPolicy = DEFAULT_OUTPUT_POLICY,
    claim_gather_ms: int = 20,
) -> AsyncIterator[Stack]:
    """``owners_by_token``: runtime tokens and the owner each acts for (default: one
    any-owner token, RUNTIME_TOKEN, as `truerun dev` has)."""
    await migrate(database_url)
    store = await open_store(database_url)
    app = coordinator(store, clock=clock, output=output)
    caps = capacity(app, MemoryObservationStore(), 15_000, clock=clock)
    owners = owners_by_token or {RUNTIME_TOKEN: ANY_OWNER}
    tokens = RuntimeTokens({token_hash(token): owner for token, owner in owners.items()})
    side = runtimes(
        app,
        caps,
        tokens,
        start_timeout_s,
        lease_ttl_ms=lease_ttl_ms,
        claim_gather_ms=claim_gather_ms,
    )
    server, port = await create_server(app, "127.0.0.1:0", caps, side, tokens=server_tokens())
    address = f"127.0.0.1:{port}"
    channel = aio_channel(address)
    try:
        yield Stack(
            app,
            caps,
            side,
            address,
            run_service_pb2_grpc.RunServiceStub(channel),
            capacity_service_pb2_grpc.CapacityServiceStub(channel),
            runtime_service_pb2_grpc.RuntimeServiceStub(channel),
        )
    finally:
        await channel.close(None)
        await server.stop(0)
        await side.dispatcher.stop()
        await store.close()
