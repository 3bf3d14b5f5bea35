"""The runtime side's view of a live long-task coordinator (``longtask_stack``): the stack
plus the stored task read as every surface reads it, the environment an attempt's process
is given, and a bounded wait that keeps the event loop (and so the server) running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from truerun.v1 import runtime_service_pb2 as pb

from longtasks.service.door import LongTaskDoor
from longtasks.service.reads import TaskReads
from services.bootstrap import longtask_watcher_sql
from tests.support.longtask_stack import LongTaskStack, longtask_stack

if TYPE_CHECKING:
    from truerun.v1.runtime_service_pb2_grpc import RuntimeServiceAsyncStub


@dataclass
class RuntimeSide:
    stack: LongTaskStack
    reads: TaskReads

    @property
    def door(self) -> LongTaskDoor:
        return self.stack.door

    @property
    def address(self) -> str:
        return self.stack.address

    @property
    def runtime(self) -> RuntimeServiceAsyncStub:
        return self.stack.runtime


@contextlib.asynccontextmanager
async def runtime_side(database_url: str) -> AsyncIterator[RuntimeSide]:
    async with longtask_stack(database_url) as stack:
        yield RuntimeSide(stack, TaskReads(longtask_watcher_sql(stack.app.store)))


def attempt_env(address: str, start: pb.Start, **extra: str) -> dict[str, str]:
    """What the reference agent gives an attempt's process: truerun's address and the run
    attempt's credential (this test process's own TRUERUN_* settings left out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRUERUN_")}
    env.update(
        TRUERUN_SERVER=address,
        TRUERUN_RUN_ID=start.run_id,
        TRUERUN_ATTEMPT_ID=start.attempt_id,
        TRUERUN_CALLBACK_TOKEN=start.callback_token,
        **extra,
    )
    return env


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    """Polls ``check`` every 50 ms until it holds; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)
