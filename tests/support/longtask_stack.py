"""A live coordinator serving LongTaskService and LongTaskAttemptService beside RunService,
capacity and the runtime protocol, on loopback over a real store, wired as `truerun dev`
wires it; and an attempt of a task whose run is really claimed and started through the
coordinator's normal path, so its callback token is the one the runtime was given."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import long_task_service_pb2_grpc, run_service_pb2_grpc, runtime_service_pb2_grpc
from truerun.v1 import runtime_service_pb2 as pb

from capacity.observations.memory import MemoryObservationStore
from coordinator.dispatch.tokens import ANY_OWNER, RuntimeTokens, token_hash
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from longtasks.service.door import LongTaskDoor
from services.bootstrap import Coordinator, capacity, coordinator, long_tasks, open_store, runtimes
from services.server import start_serving
from tests.support.auth import aio_channel, server_tokens
from tests.support.runtime_stack import RUNTIME_TOKEN
from tests.support.schema_templates import migrate
from tests.support.scripted_runtime import ScriptedRuntime

if TYPE_CHECKING:
    from truerun.v1.long_task_service_pb2_grpc import (
        LongTaskAttemptServiceAsyncStub,
        LongTaskServiceAsyncStub,
        RunPromotionServiceAsyncStub,
    )
    from truerun.v1.run_service_pb2_grpc import RunServiceAsyncStub
    from truerun.v1.runtime_service_pb2_grpc import RuntimeServiceAsyncStub

SCHEDULER = Actor(ActorType.SCHEDULER, "long-task-scheduler")
#: A token that sees project "elsewhere" only.
BOB_TOKEN = "bob-token"


@dataclass
class LongTaskStack:
    app: Coordinator
    door: LongTaskDoor
    address: str
    tasks: LongTaskServiceAsyncStub  # as the test operator ("tester", every project)
    bobs: LongTaskServiceAsyncStub  # as bob, who sees another project only
    attempts: LongTaskAttemptServiceAsyncStub  # no bearer token at all
    runs: RunServiceAsyncStub
    runtime: RuntimeServiceAsyncStub
    promotions: RunPromotionServiceAsyncStub  # no bearer token at all


@contextlib.asynccontextmanager
async def longtask_stack(
    database_url: str, max_unfinished: int = 0
) -> AsyncIterator[LongTaskStack]:
    """``max_unfinished``: TRUERUN_LONG_TASK_OWNER_MAX_UNFINISHED (0 = no cap)."""
    await migrate(database_url)
    store = await open_store(database_url)
    app = coordinator(store)
    caps = capacity(app, MemoryObservationStore(), 15_000)
    tokens = RuntimeTokens({token_hash(RUNTIME_TOKEN): ANY_OWNER})
    side = runtimes(app, caps, tokens)
    door = long_tasks(app)
    serving = await start_serving(
        app,
        "127.0.0.1:0",
        caps,
        side,
        tokens=server_tokens(f"bob={BOB_TOKEN}:elsewhere"),
        long_tasks=door,
        long_task_max_unfinished=max_unfinished,
    )
    address = f"127.0.0.1:{serving.port}"
    channel = aio_channel(address)
    bob = aio_channel(address, BOB_TOKEN)
    bare = aio_channel(address, "")
    try:
        yield LongTaskStack(
            app,
            door,
            address,
            long_task_service_pb2_grpc.LongTaskServiceStub(channel),
            long_task_service_pb2_grpc.LongTaskServiceStub(bob),
            long_task_service_pb2_grpc.LongTaskAttemptServiceStub(bare),
            run_service_pb2_grpc.RunServiceStub(channel),
            runtime_service_pb2_grpc.RuntimeServiceStub(channel),
            long_task_service_pb2_grpc.RunPromotionServiceStub(bare),
        )
    finally:
        for open_channel in (channel, bob, bare):
            await open_channel.close(None)
        await serving.server.stop(0)
        await side.dispatcher.stop()
        await store.close()


@dataclass
class LiveAttempt:
    runtime: ScriptedRuntime
    credential: lt.AttemptCredential
    attempt_id: str  # the long-task attempt
    start: pb.Start  # what the runtime was told to start


async def start_attempt(stack: LongTaskStack, task_id: str, owner: str) -> LiveAttempt:
    """The scheduler's part (``door.start_attempt``: the attempt and its run in one commit),
    then the run claimed by a connected runtime of ``owner`` and started: the credential is
    what the runtime process is given (TRUERUN_RUN_ID, _ATTEMPT_ID, _CALLBACK_TOKEN)."""
    started = await stack.door.start_attempt(task_id, SCHEDULER)
    assert started.run_id is not None and started.made is not None
    runtime = ScriptedRuntime(stack.runtime, owner=owner, instance=f"inst-{started.made}")
    await runtime.connect()
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    assert start.run_id == started.run_id
    await runtime.answer_start(start, accepted=True)
    credential = lt.AttemptCredential(
        run_id=start.run_id, run_attempt_id=start.attempt_id, callback_token=start.callback_token
    )
    return LiveAttempt(runtime, credential, started.made, start)


async def finish_run(live: LiveAttempt) -> None:
    """The attempt's process exits 0 and its runtime reports it (accepted, running,
    succeeded), as the reference agent does."""
    start = live.start
    await live.runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await live.runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
    await live.runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
    await live.runtime.acked(start.attempt_id, 3)
