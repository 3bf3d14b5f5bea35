"""A real RunService gRPC server on 127.0.0.1:0 over a real store, for integration tests.

``grpc_run_service(url)`` migrates the database, opens the store named by ``url``, wires the
coordinator exactly as production does (services.bootstrap + services.server), starts the
server on an ephemeral port and yields a ``GrpcApi`` (stub, store, address). On exit the
channel is closed, the server stopped (streams still open are cancelled) and the store closed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, NamedTuple

from truerun.v1 import run_service_pb2_grpc

from coordinator.store.base import RunStore
from kernel.ids import now_ms
from services.bootstrap import coordinator, open_store
from services.server import create_server
from tests.support.auth import aio_channel, server_tokens
from tests.support.schema_templates import migrate as migrate_to_head

if TYPE_CHECKING:
    from truerun.v1.run_service_pb2_grpc import RunServiceAsyncStub

HOST = "127.0.0.1"


class GrpcApi(NamedTuple):
    stub: RunServiceAsyncStub
    store: RunStore
    address: str  # "127.0.0.1:<port>", for extra channels (health, reflection, raw calls)


@asynccontextmanager
async def grpc_run_service(
    database_url: str,
    *,
    migrate: bool = True,
    wrap_store: Callable[[RunStore], RunStore] | None = None,
    tokens: str = "",
    clock: Callable[[], int] = now_ms,
) -> AsyncIterator[GrpcApi]:
    """Serve RunService for ``database_url`` until the block exits.

    ``migrate=False`` skips the (idempotent) upgrade for a database already at head.
    ``wrap_store`` may put a delegating wrapper (e.g. one that holds writes at a gate to
    force an interleaving) between the service and the real store; ``GrpcApi.store`` is then
    the wrapper. ``tokens``: more API tokens (ApiTokens.parse) besides the test operator's.
    ``clock``: UTC ms for every decision (a test's fake clock: tests/support/clock.py).
    """
    if migrate:
        await migrate_to_head(database_url)
    real_store = await open_store(database_url)
    store = wrap_store(real_store) if wrap_store is not None else real_store
    try:
        server, port = await create_server(
            coordinator(store, clock=clock), f"{HOST}:0", tokens=server_tokens(tokens)
        )
        try:
            address = f"{HOST}:{port}"
            async with aio_channel(address) as channel:
                await channel.channel_ready()
                yield GrpcApi(run_service_pb2_grpc.RunServiceStub(channel), store, address)
        finally:
            await server.stop(None)
    finally:
        await real_store.close()
