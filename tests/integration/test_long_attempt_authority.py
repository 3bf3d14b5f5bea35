"""Issue #11 §7 over a real gRPC stream, on SQLite and PostgreSQL, under a fake clock: a
multi-day attempt keeps its authority while its runtime vouches for it (every heartbeat that
lists the task keeps its callback token valid 24 h on), and an event refused for authority is
never acknowledged as processed (the runtime keeps it and sends it again)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from kernel.ids import now_ms
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime

HOUR_MS = 3_600_000


class FakeClock:
    def __init__(self) -> None:
        self.now = now_ms()

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def stack(migrated_database_url: str, clock: FakeClock) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url, clock=clock) as live:
        yield live


async def _running(stack: Stack) -> tuple[ScriptedRuntime, pb.Start]:
    request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="weekly-report")
    await stack.runs.CreateRun(request)
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    await runtime.answer_start(start, accepted=True)
    await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
    await runtime.acked(start.attempt_id, 2)
    return runtime, start


async def _token_expiry(stack: Stack, attempt_id: str) -> int:
    loaded = await stack.app.store.load_attempts([attempt_id])
    attempt = loaded[attempt_id].attempt
    assert attempt is not None and attempt.callback_token_expires_at_ms is not None
    return attempt.callback_token_expires_at_ms


async def test_a_26_hour_attempt_finishes_normally(stack: Stack, clock: FakeClock) -> None:
    runtime, start = await _running(stack)
    try:
        for hour in range(1, 27):  # a heartbeat an hour, each listing the task
            clock.now += HOUR_MS
            await runtime.heartbeat(limit=1, active=[start.runtime_task_id])
            want = clock.now + 24 * HOUR_MS
            for _ in range(200):  # bounded: the heartbeat is handled off this task
                if await _token_expiry(stack, start.attempt_id) >= want:
                    break
                await asyncio.sleep(0.02)
            assert await _token_expiry(stack, start.attempt_id) >= want, hour
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
        await runtime.acked(start.attempt_id, 3)
    finally:
        await runtime.close()
    run = await stack.runs.GetRun(rs.GetRunRequest(id=start.run_id))
    assert run.display_state == common_pb2.DISPLAY_STATE_SUCCEEDED
    assert run.current_attempt.exit_code == 0


async def test_an_event_refused_for_authority_is_not_acknowledged(
    stack: Stack, clock: FakeClock
) -> None:
    """Nobody vouched for the task for 25 hours: its token has expired. The finishing event is
    refused and not acknowledged, so the runtime keeps it; nothing changes on the run."""
    runtime, start = await _running(stack)
    try:
        clock.now += 25 * HOUR_MS
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
        refused = stack.runtimes.sessions.refused
        for _ in range(200):
            if refused["event_not_authorized"] >= 1:
                break
            await asyncio.sleep(0.02)
        assert refused["event_not_authorized"] == 1
        with pytest.raises(TimeoutError):
            await runtime.acked(start.attempt_id, 3, timeout=1.0)
    finally:
        await runtime.close()
    run = await stack.runs.GetRun(rs.GetRunRequest(id=start.run_id))
    assert run.display_state == common_pb2.DISPLAY_STATE_RUNNING
    assert run.current_attempt.last_event_seq == 2
