"""Issue #18 over a real gRPC stream, on SQLite and PostgreSQL: a heartbeat vouches only for
the tasks it lists; a runtime that had a task and lost it says so (Inspect LOST); every Hello
is answered by inspecting the instance's started attempts; an Inspect answer counts only for
an Inspect that was asked.

The scripted runtime sends what the reference agent sends: an observation naming its active
and queued tasks, StartResult then ACCEPTED (seq 1), RUNNING (seq 2), and an InspectResult
for each Inspect."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime

LEASE_MS = 3_000  # heartbeat interval 1 s, so a task unlisted for 2 s is missing


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(
        migrated_database_url, start_timeout_s=1.0, lease_ttl_ms=LEASE_MS
    ) as live:
        yield live


@contextlib.asynccontextmanager
async def _runtime(stack: Stack) -> AsyncIterator[ScriptedRuntime]:
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    try:
        yield runtime
    finally:
        await runtime.close()


async def _submit(stack: Stack, task: str, **extra: object) -> str:
    request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id=task, **extra)  # type: ignore[arg-type]
    return str((await stack.runs.CreateRun(request)).run.id)


async def _run(stack: Stack, run_id: str) -> common_pb2.Run:
    return await stack.runs.GetRun(rs.GetRunRequest(id=run_id))


def _display(run: common_pb2.Run) -> str:
    return str(common_pb2.DisplayState.Name(run.display_state)).removeprefix("DISPLAY_STATE_")


async def _until(
    check: Callable[[], Awaitable[common_pb2.Run]],
    done: Callable[[common_pb2.Run], bool],
    what: str,
    timeout: float = 10.0,
) -> common_pb2.Run:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        run = await check()
        if done(run):
            return run
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; now {_display(run)}: {run}")
        await asyncio.sleep(0.05)


async def _running(stack: Stack, runtime: ScriptedRuntime) -> pb.Start:
    """Claimed, started, accepted and reported running, listed in a heartbeat."""
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    await runtime.answer_start(start, accepted=True)
    await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
    await runtime.acked(start.attempt_id, 2)
    await runtime.heartbeat(limit=1, active=[start.runtime_task_id])
    assert _display(await _run(stack, start.run_id)) == "RUNNING"
    return start


async def _answer(runtime: ScriptedRuntime, start: pb.Start, state: int) -> None:
    inspect = (await runtime.expect("inspect")).inspect
    assert (inspect.attempt_id, inspect.runtime_task_id) == (
        start.attempt_id,
        start.runtime_task_id,
    )
    await runtime.send_inspect_result(
        pb.InspectResult(
            attempt_id=start.attempt_id,
            runtime_task_id=start.runtime_task_id,
            state=state,  # type: ignore[arg-type]
            last_seq=2,
        )
    )


async def _missing(stack: Stack, runtime: ScriptedRuntime, start: pb.Start) -> common_pb2.Run:
    """Heartbeats that no longer list the task: past the grace the run shows unknown, with
    a reason that names the runtime, and the runtime is asked (Inspect)."""

    async def beat() -> common_pb2.Run:
        await runtime.heartbeat(limit=1)
        return await _run(stack, start.run_id)

    run = await _until(beat, lambda r: _display(r) == "UNKNOWN", "unknown", timeout=10.0)
    assert "runtime inst-1 is up but does not list this task since" in run.display_reason
    # unknown since the last evidence (the RUNNING event), not since the heartbeat
    assert run.display_since_time == run.current_attempt.observe_time
    assert run.current_attempt.status == common_pb2.ATTEMPT_STATUS_RUNNING  # the slot is held
    return run


async def test_a_heartbeat_that_omits_a_started_task_makes_it_unknown_then_inspects(
    stack: Stack,
) -> None:
    run_id = await _submit(stack, "job")
    async with _runtime(stack) as runtime:
        start = await _running(stack, runtime)
        unknown = await _missing(stack, runtime, start)
        await runtime.heartbeat(limit=1)
        await runtime.heartbeat(limit=1, active=["rt-someone-else"])
        attempt = (await _run(stack, run_id)).current_attempt
        # no renewal by heartbeats that do not list it
        assert attempt.lease_expire_time == unknown.current_attempt.lease_expire_time
        occupancy = await stack.capacity.GetOccupancy(
            cap.GetOccupancyRequest(owner_id="alice", runtime_instance_id="inst-1")
        )
        assert occupancy.durable_rows == 1 and occupancy.free_slots == 0  # unknown holds it
        await _answer(runtime, start, pb.INSPECT_STATE_RUNNING)
        await runtime.heartbeat(limit=1, active=[start.runtime_task_id])
        back = await _until(
            lambda: _run(stack, run_id), lambda r: _display(r) == "RUNNING", "back in sync"
        )
        assert back.current_attempt.sync_state == common_pb2.SYNC_STATE_IN_SYNC


async def test_a_task_the_runtime_lost_is_lost_and_an_idempotent_run_runs_again_once(
    stack: Stack,
) -> None:
    run_id = await _submit(stack, "idem", idempotent=True)
    async with _runtime(stack) as runtime:
        first = await _running(stack, runtime)
        await _missing(stack, runtime, first)
        await _answer(runtime, first, pb.INSPECT_STATE_LOST)
        await runtime.heartbeat(limit=1)  # the slot is free again: the retry is claimed
        second = (await runtime.expect("start")).start
        assert second.run_id == run_id and second.attempt_id != first.attempt_id
    attempts = await stack.app.store.list_attempts(run_id)
    assert [(a.attempt_no, a.status.value) for a in attempts] == [(1, "lost"), (2, "starting")]
    assert (attempts[0].termination_reason or "").startswith("runtime_reports_lost")


async def test_a_reconnect_inspects_every_started_attempt_and_a_lost_one_waits_for_a_person(
    stack: Stack,
) -> None:
    """The stream being back proves nothing: on Hello every started attempt is inspected.
    The restarted runtime had the task and lost it: a run that is not idempotent is lost,
    its slot released, and it waits for a person (no new attempt)."""
    run_id = await _submit(stack, "once")
    async with _runtime(stack) as runtime:
        start = await _running(stack, runtime)
    async with _runtime(stack) as again:  # the same instance, restarted on its state
        await _answer(again, start, pb.INSPECT_STATE_LOST)
        lost = await _until(lambda: _run(stack, run_id), lambda r: _display(r) == "LOST", "lost")
        assert "runtime_reports_lost" in lost.current_attempt.termination_reason
        occupancy = await stack.capacity.GetOccupancy(
            cap.GetOccupancyRequest(owner_id="alice", runtime_instance_id="inst-1")
        )
        assert occupancy.durable_rows == 0
        await again.heartbeat(limit=1)
        with pytest.raises(TimeoutError):
            await again.expect("start", timeout=1.5)
    assert [a.status.value for a in await stack.app.store.list_attempts(run_id)] == ["lost"]


async def test_an_inspect_answer_nobody_asked_for_is_evidence_of_nothing(stack: Stack) -> None:
    run_id = await _submit(stack, "job")
    async with _runtime(stack) as runtime:
        start = await _running(stack, runtime)
        await runtime.send_inspect_result(
            pb.InspectResult(
                attempt_id=start.attempt_id,
                runtime_task_id=start.runtime_task_id,
                state=pb.INSPECT_STATE_FINISHED,
                terminal_type=pb.RUNTIME_EVENT_TYPE_SUCCEEDED,
                exit_code=0,
            )
        )
        # an event after it on the same stream: once it is applied, the answer was handled
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload={"text": "x"})
        await runtime.acked(start.attempt_id, 3)
        run = await _run(stack, run_id)
        assert _display(run) == "RUNNING"
        types = [
            e.type
            for e in (await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))).events
        ]
        assert "run.succeeded" not in types and "attempt.inspected" not in types


async def test_a_queued_task_listed_in_the_heartbeat_keeps_its_lease(stack: Stack) -> None:
    """Accepted and waiting in the runtime's queue (waiting_runtime): listed by task id in
    queued_task_ids, it stays vouched for across several leases' worth of heartbeats."""
    run_id = await _submit(stack, "waits")
    async with _runtime(stack) as runtime:
        await runtime.heartbeat(limit=1)
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await runtime.acked(start.attempt_id, 1)
        first = (await _run(stack, run_id)).current_attempt.lease_expire_time.ToMilliseconds()

        async def beat() -> common_pb2.Run:
            await runtime.heartbeat(limit=1, queued=[start.runtime_task_id])
            return await _run(stack, run_id)

        later = await _until(
            beat,
            lambda r: r.current_attempt.lease_expire_time.ToMilliseconds() > first + LEASE_MS,
            "a lease renewed past one more lease",
        )
        assert _display(later) == "WAITING_RUNTIME"
