"""An Inspect that reaches the reference agent just as its command ends (on SQLite and
PostgreSQL, a real coordinator and an in-process agent): the command's last output is not
lost. The coordinator inspects every started attempt when a runtime reconnects (e.g. after a
coordinator restart), and it ends an attempt on a FINISHED answer that says nothing is left
to send; the agent's answer therefore waits until it has written the rest of the output and
the terminal event, so they are committed before the answer is applied, never dropped after
it as late evidence.

The window is made certain, not hoped for: the agent's monitor of the task is parked (it
looks at the task again only when woken) while the command ends and the Inspect is asked.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs

from tests.runtime.helpers import eventually, sweep
from tests.support.longtask_runtime import until
from tests.support.runtime_stack import RUNTIME_TOKEN, Stack, runtime_stack
from truerun_runtime import Backoff
from truerun_runtime.agent.agent import Agent
from truerun_runtime.agent.config import AgentConfig
from truerun_runtime.agent.runner import TaskRunner

OWNER = "alice"
LINES = [f"after {i}" for i in range(1, 21)]


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url) as live:
        yield live


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="trt-"))  # short: the agent's unix socket lives there
    try:
        yield path
    finally:
        sweep(path)
        shutil.rmtree(path, ignore_errors=True)


async def _output(stack: Stack, run_id: str) -> str:
    text, offset = [], 0
    while True:
        page = await stack.runs.ReadRunOutput(rs.ReadRunOutputRequest(run_id=run_id, offset=offset))
        text += [chunk.text for chunk in page.chunks]
        if page.next_offset >= page.stored_bytes:
            return "".join(text)
        offset = page.next_offset


async def test_an_inspect_as_the_command_ends_loses_none_of_its_output(
    stack: Stack, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = root / "gate"
    command = f"echo before; while [ ! -e '{gate}' ]; do sleep 0.02; done; " + "; ".join(
        f"echo '{line}'" for line in LINES
    )
    config = AgentConfig(
        server=stack.address,
        token=RUNTIME_TOKEN,
        owner_id=OWNER,
        state_dir=root / "state",
        limit=1,
        poll_s=0.02,
        backoff=Backoff(initial_s=0.05, max_s=0.2),
    )
    agent = Agent(config)
    running = asyncio.create_task(agent.run())
    try:
        spec = struct_pb2.Struct()
        spec.update({"command": command})
        created = await stack.runs.CreateRun(
            rs.CreateRunRequest(project_id="p", owner_id=OWNER, task_id="t", spec=spec)
        )
        run_id = created.run.id

        async def printed_before() -> bool:
            return await _output(stack, run_id) == "before\n"

        await until("the first line in the output store", printed_before)
        attempt_id = (await stack.runs.GetRun(rs.GetRunRequest(id=run_id))).current_attempt_id
        runner = agent.runners[attempt_id]

        # From now on the monitor of the task looks at it again only when woken.
        parked = asyncio.Event()
        release = asyncio.Event()

        async def sleep_until_woken(self: TaskRunner) -> None:
            parked.set()
            wake = asyncio.ensure_future(self._wake.wait())
            freed = asyncio.ensure_future(release.wait())
            await asyncio.wait({wake, freed}, return_when=asyncio.FIRST_COMPLETED)
            for waiter in (wake, freed):
                waiter.cancel()
            self._wake.clear()

        monkeypatch.setattr(TaskRunner, "_sleep", sleep_until_woken)
        await asyncio.wait_for(parked.wait(), 10)
        gate.touch()
        # the supervisor recorded the exit; the monitor has not looked since
        await eventually(runner.paths.status.exists, what="the command's exit status")
        assert runner.result is None

        # What a reconnect does: every started attempt of the instance is inspected.
        loaded = await stack.app.transitions.reader.load(run_id)
        assert loaded is not None and loaded.attempt is not None
        stack.runtimes.dispatcher.send_inspect(loaded.attempt)

        async def ended() -> bool:
            run = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
            return run.display_state == common_pb2.DISPLAY_STATE_SUCCEEDED

        await until("the run to succeed", ended)
        release.set()  # a monitor still parked (the answer did not wait for it) goes on
        await eventually(lambda: runner.result is not None, what="the task settled")

        async def all_acked() -> bool:
            outbox = agent.outbox
            return outbox.acked_seq(attempt_id) == outbox.last_seq(attempt_id)

        await until("every event of the attempt acknowledged", all_acked)
        assert await _output(stack, run_id) == "before\n" + "".join(f"{x}\n" for x in LINES)
        page = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id, page_size=500))
        types = [event.type for event in page.events]
        assert "attempt.late_callback_ignored" not in types, types
        assert types.count("attempt.succeeded") == 1, types
    finally:
        agent.stop()
        await asyncio.wait_for(running, 10)
