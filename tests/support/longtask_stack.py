"""A live coordinator serving RunService, CapacityService, RuntimeService and both long-task
services on loopback, over a real store: the runtime side of long tasks talks to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from truerun.v1 import runtime_service_pb2_grpc

from capacity.observations.memory import MemoryObservationStore
from coordinator.dispatch.tokens import ANY_OWNER, RuntimeTokens, token_hash
from kernel.db.migrate import upgrade
from longtasks.service.door import LongTaskDoor
from longtasks.service.reads import TaskReads
from services.bootstrap import (
    Coordinator,
    capacity,
    coordinator,
    long_tasks,
    longtask_sql,
    open_store,
    runtimes,
)
from services.server import start_serving
from tests.support.auth import aio_channel, server_tokens
from tests.support.runtime_stack import RUNTIME_TOKEN

if TYPE_CHECKING:
    from truerun.v1.runtime_service_pb2_grpc import RuntimeServiceAsyncStub


@dataclass
class LongTaskStack:
    app: Coordinator
    door: LongTaskDoor
    reads: TaskReads
    address: str
    runtime: RuntimeServiceAsyncStub


@contextlib.asynccontextmanager
async def long_task_stack(
    database_url: str, start_timeout_s: float = 10.0
) -> AsyncIterator[LongTaskStack]:
    """One any-owner runtime token, RUNTIME_TOKEN (as `truerun dev` has)."""
    await upgrade(database_url)
    store = await open_store(database_url)
    app = coordinator(store)
    caps = capacity(app, MemoryObservationStore(), 15_000)
    tokens = RuntimeTokens({token_hash(RUNTIME_TOKEN): ANY_OWNER})
    side = runtimes(app, caps, tokens, start_timeout_s)
    door = long_tasks(app)
    serving = await start_serving(
        app, "127.0.0.1:0", caps, side, tokens=server_tokens(), long_tasks=door
    )
    address = f"127.0.0.1:{serving.port}"
    channel = aio_channel(address)
    try:
        yield LongTaskStack(
            app,
            door,
            TaskReads(longtask_sql(store)),
            address,
            runtime_service_pb2_grpc.RuntimeServiceStub(channel),
        )
    finally:
        await channel.close(None)
        await serving.server.stop(0)
        await side.dispatcher.stop()
        await store.close()
