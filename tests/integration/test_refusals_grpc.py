"""Issue #11 §1 over a real gRPC stream, on SQLite and PostgreSQL: a runtime's "no" is
honoured whatever seq it carries, an accepted StartResult is evidence of acceptance event or
not, a RUNNING with an idle turn is not proof of running, and a person can settle a stuck
attempt. The scripted runtime answers as the reference agent does (refusal: seq 0, no
event; acceptance: StartResult then ACCEPTED seq 1)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime

OPERATOR = common_pb2.Actor(type=common_pb2.ACTOR_TYPE_OPERATOR, id="ops@example")


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url, start_timeout_s=5.0) as live:
        yield live


@pytest.fixture
async def runtime(stack: Stack) -> AsyncIterator[ScriptedRuntime]:
    scripted = ScriptedRuntime(stack.runtime)
    await scripted.connect()
    yield scripted
    await scripted.close()


async def _submit(stack: Stack, task: str = "job") -> str:
    request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id=task)
    return str((await stack.runs.CreateRun(request)).run.id)


async def _run(stack: Stack, run_id: str) -> common_pb2.Run:
    return await stack.runs.GetRun(rs.GetRunRequest(id=run_id))


def _shown(run: common_pb2.Run) -> str:
    return str(common_pb2.DisplayState.Name(run.display_state)).removeprefix("DISPLAY_STATE_")


async def _until(
    stack: Stack, run_id: str, done: Callable[[common_pb2.Run], bool], what: str
) -> common_pb2.Run:
    for _ in range(200):  # bounded: answers are applied off the request path
        run = await _run(stack, run_id)
        if done(run):
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}: {run}")


async def _refuse(
    runtime: ScriptedRuntime,
    seq: int,
    refusal: pb.StartRefusal.ValueType = pb.START_REFUSAL_UNSPECIFIED,
) -> pb.Start:
    start = (await runtime.expect("start", timeout=15)).start
    await runtime.answer_start(
        start,
        False,
        "the runtime is draining",
        refusal=refusal,
        seq=seq,
    )
    return start


async def _occupied(stack: Stack) -> int:
    occupancy = await stack.capacity.GetOccupancy(
        cap.GetOccupancyRequest(owner_id="alice", runtime_instance_id="inst-1")
    )
    return int(occupancy.durable_rows)


@pytest.mark.parametrize("seq", [0, 1], ids=["seq-0", "seq-1"])
async def test_a_refusal_puts_the_same_attempt_back_whatever_its_seq(
    stack: Stack, runtime: ScriptedRuntime, seq: int
) -> None:
    """Refused twice (the second time after the pause), then accepted: one attempt row all
    along, its retry budget untouched, the slot free between, each reason kept."""
    run_id = await _submit(stack)
    await runtime.heartbeat(limit=1)
    first = await _refuse(runtime, seq)
    await _until(stack, run_id, lambda r: _shown(r) == "QUEUED", "queued again")
    assert await _occupied(stack) == 0
    await runtime.heartbeat(limit=1)
    second = await _refuse(runtime, seq)  # the re-sent Start's refusal counts too
    assert second.attempt_id == first.attempt_id
    await _until(stack, run_id, lambda r: _shown(r) == "QUEUED", "queued again")
    await runtime.heartbeat(limit=1)
    third = (await runtime.expect("start", timeout=15)).start
    await runtime.answer_start(third, accepted=True)
    await runtime.event(third, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await runtime.acked(third.attempt_id, 1)
    run = await _until(stack, run_id, lambda r: _shown(r) == "WAITING_RUNTIME", "accepted")
    assert third.attempt_id == first.attempt_id and run.attempt_count == 1
    events = (await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))).events
    rejected = [e for e in events if e.type == "attempt.start_rejected"]
    assert len(rejected) == 2
    assert all(e.payload["reason"] == "the runtime is draining" for e in rejected)
    assert "attempt.late_callback_ignored" not in [e.type for e in events]


async def test_an_invalid_spec_refusal_fails_the_run_with_the_reason(
    stack: Stack, runtime: ScriptedRuntime
) -> None:
    run_id = await _submit(stack)
    await runtime.heartbeat(limit=1)
    await _refuse(runtime, 0, pb.START_REFUSAL_INVALID_SPEC)
    run = await _until(stack, run_id, lambda r: _shown(r) == "FAILED", "failed")
    assert run.error_code == "start_refused"
    assert run.error_summary == "refused by inst-1: the runtime is draining"
    assert await _occupied(stack) == 0


async def test_too_many_refusals_wait_for_a_person(stack: Stack) -> None:
    stack.runtimes.dispatcher.max_recoveries = 1
    scripted = ScriptedRuntime(stack.runtime)
    await scripted.connect()
    try:
        run_id = await _submit(stack)
        await scripted.heartbeat(limit=1)
        await _refuse(scripted, 0)
        await _until(stack, run_id, lambda r: _shown(r) == "QUEUED", "queued again")
        await scripted.heartbeat(limit=1)
        await _refuse(scripted, 0)
        run = await _until(stack, run_id, lambda r: _shown(r) == "DEAD_LETTER", "dead letter")
    finally:
        await scripted.close()
    assert run.error_code == "refused_too_often"
    assert run.error_summary.startswith("refused by inst-1: the runtime is draining;")
    assert run.display_reason == run.error_summary
    assert await _occupied(stack) == 0


async def test_an_accepted_start_without_an_event_is_waiting_runtime(
    stack: Stack, runtime: ScriptedRuntime
) -> None:
    run_id = await _submit(stack)
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    await runtime.answer_start(start, accepted=True)  # and no ACCEPTED event
    run = await _until(stack, run_id, lambda r: _shown(r) == "WAITING_RUNTIME", "accepted")
    assert run.current_attempt.last_event_seq == 0  # no seq used up
    await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)  # late: still applied
    await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
    await runtime.acked(start.attempt_id, 2)
    assert _shown(await _run(stack, run_id)) == "RUNNING"


async def test_running_with_an_idle_turn_is_not_running(
    stack: Stack, runtime: ScriptedRuntime
) -> None:
    run_id = await _submit(stack)
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    await runtime.answer_start(start, accepted=True)
    await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    idle = pb.RuntimeEvent(
        attempt_id=start.attempt_id,
        runtime_task_id=start.runtime_task_id,
        seq=2,
        type=pb.RUNTIME_EVENT_TYPE_RUNNING,
        callback_token=start.callback_token,
        turn_status=pb.TURN_STATUS_IDLE,
    )
    await runtime._outgoing.put(pb.ConnectRequest(event=idle))
    await runtime.acked(start.attempt_id, 2)
    run = await _run(stack, run_id)
    assert _shown(run) == "WAITING_RUNTIME"
    assert run.current_attempt.status == common_pb2.ATTEMPT_STATUS_STARTING


async def test_a_person_settles_an_attempt_stuck_in_starting(
    stack: Stack, runtime: ScriptedRuntime
) -> None:
    """The runtime got the Start and never said anything (a stuck agent): not unknown yet,
    but an operator may settle it with an audited reason."""
    run_id = await _submit(stack)
    await runtime.heartbeat(limit=1)
    await runtime.expect("start")
    assert _shown(await _run(stack, run_id)) == "STARTING"
    resolved = await stack.runs.ResolveRun(
        rs.ResolveRunRequest(
            id=run_id,
            actor=OPERATOR,
            reason="the host never ran it; checked its logs",
            resolution=rs.RESOLUTION_FAILED,
        )
    )
    assert _shown(resolved) == "FAILED"
    assert resolved.error_summary == "the host never ran it; checked its logs"
    assert await _occupied(stack) == 0
