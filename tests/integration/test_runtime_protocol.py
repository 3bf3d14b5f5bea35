"""The runtime protocol over real gRPC on loopback (seed A §14 rows that need a runtime)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from coordinator.dispatch import dispatcher
from coordinator.dispatch.retries import RetryScheduler
from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service.transitions import Transitions
from services.bootstrap import open_store
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime

RECONCILER = Actor(ActorType.RECONCILER, "leases")


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url, start_timeout_s=1.0) as live:
        yield live


async def _submit(stack: Stack, task: str = "job", **extra: object) -> str:
    response = await stack.runs.CreateRun(
        rs.CreateRunRequest(project_id="p", owner_id="alice", task_id=task, **extra)  # type: ignore[arg-type]
    )
    return str(response.run.id)


async def _display(stack: Stack, run_id: str) -> str:
    run = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
    return str(common_pb2.DisplayState.Name(run.display_state)).removeprefix("DISPLAY_STATE_")


@contextlib.asynccontextmanager
async def _connected(stack: Stack, limit: int = 1) -> AsyncIterator[ScriptedRuntime]:
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=limit)
        yield runtime
    finally:
        await runtime.close()


async def _accepted(runtime: ScriptedRuntime, *running_seqs: int) -> pb.Start:
    """The next Start, answered accepted, with ACCEPTED (seq 1) and RUNNING at the given seqs."""
    start = (await runtime.expect("start")).start
    await runtime.answer_start(start, accepted=True)
    await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    for seq in running_seqs:
        await runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_RUNNING)
    await runtime.acked(start.attempt_id, max((1, *running_seqs)))
    return start


async def _types(stack: Stack, run_id: str) -> list[str]:
    page = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id, page_size=500))
    return [e.type for e in page.events]


async def test_claim_done_start_not_answered_shows_starting(stack: Stack) -> None:
    """Seed A §14: claim done, Start not (yet) answered -> starting, never running."""
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = (await runtime.expect("start")).start
        assert start.run_id == run_id and start.callback_token
        assert await _display(stack, run_id) == "STARTING"
        run = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        assert run.current_attempt.HasField("start_request_time")  # the fence came first


async def test_accepted_without_an_active_turn_shows_waiting_runtime(stack: Stack) -> None:
    """Seed A §14: runtime accepted, no active turn -> waiting_runtime."""
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        await _accepted(runtime)
        assert await _display(stack, run_id) == "WAITING_RUNTIME"


async def test_first_runtime_event_shows_running_with_observed_at_and_seq(stack: Stack) -> None:
    """Seed A §14: the first runtime event -> running, with observed_at and the event seq."""
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        await _accepted(runtime, 2)
        run = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        assert run.display_state == common_pb2.DISPLAY_STATE_RUNNING
        assert run.current_attempt.last_event_seq == 2
        assert run.current_attempt.HasField("observe_time")


async def test_start_accept_run_succeed(stack: Stack) -> None:
    run_id = await _submit(stack)
    async with _connected(stack, limit=2) as runtime:
        start = await _accepted(runtime, 2)
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload={"text": "hi\n"})
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)  # duplicate
        await runtime.event(start, 4, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
        await runtime.acked(start.attempt_id, 4)
        assert await _display(stack, run_id) == "SUCCEEDED"
        types = await _types(stack, run_id)
        assert types.count("attempt.late_callback_ignored") == 1
        assert "attempt.output_progressed" in types and types[-1] == "run.succeeded"
        output = await stack.runs.ReadRunOutput(rs.ReadRunOutputRequest(run_id=run_id))
        assert [chunk.text for chunk in output.chunks] == ["hi\n"]
        assert output.attempt_finished and output.run_finished
        assert output.next_offset == output.stored_bytes == 3


async def test_start_response_lost_is_unknown_and_holds_capacity(stack: Stack) -> None:
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = (await runtime.expect("start")).start
        # never answer: the dispatcher's timeout (1 s here) ends in dispatch-unknown
        for _ in range(100):
            if await _display(stack, run_id) == "UNKNOWN":
                break
            await asyncio.sleep(0.05)
        assert await _display(stack, run_id) == "UNKNOWN"
        occupancy = await stack.capacity.GetOccupancy(
            cap.GetOccupancyRequest(owner_id="alice", runtime_instance_id="inst-1")
        )
        assert occupancy.durable_rows == 1 and occupancy.free_slots == 0
        second = await _submit(stack, "other")
        await runtime.heartbeat(limit=1)
        with pytest.raises(TimeoutError):
            await runtime.expect("start", timeout=1.5)  # D=1 is held: no second Start
        assert await _display(stack, second) == "QUEUED"
        assert start.attempt_id  # the first Start was the only one ever sent


async def test_rejected_start_requeues_the_same_attempt(stack: Stack) -> None:
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = (await runtime.expect("start")).start
        # a transient refusal (the runtime is draining); an invalid spec would fail the run
        await runtime.answer_start(
            start, accepted=False, reason="draining", refusal=pb.START_REFUSAL_BUSY
        )
        again = (await runtime.expect("start")).start  # re-claimed: same attempt row
        assert again.attempt_id == start.attempt_id
        types = await _types(stack, run_id)
        assert "attempt.start_rejected" in types
        run = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        assert run.attempt_count == 1


async def test_cancel_after_start_is_cancelling_until_the_runtime_confirms(stack: Stack) -> None:
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = await _accepted(runtime, 2)
        response = await stack.runs.CancelRun(rs.CancelRunRequest(id=run_id))
        assert response.outcome == rs.CANCEL_OUTCOME_REQUESTED
        cancel = (await runtime.expect("cancel")).cancel
        assert cancel.attempt_id == start.attempt_id
        assert await _display(stack, run_id) == "CANCELLING"
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_SIGNALLED, payload={"signal": "TERM"})
        await runtime.event(start, 4, pb.RUNTIME_EVENT_TYPE_CANCELLED, exit_code=-15)
        await runtime.acked(start.attempt_id, 4)
        assert await _display(stack, run_id) == "CANCELLED"


async def test_cancel_before_start_sends_nothing_to_the_runtime(stack: Stack) -> None:
    run_id = await _submit(stack)
    response = await stack.runs.CancelRun(rs.CancelRunRequest(id=run_id))
    assert response.outcome == rs.CANCEL_OUTCOME_CANCELLED
    async with _connected(stack) as runtime:
        with pytest.raises(TimeoutError):
            await runtime.expect("start", timeout=1.5)
        assert not [m for m in runtime.seen if m.WhichOneof("kind") == "cancel"]


async def test_event_with_a_wrong_callback_token_changes_nothing(stack: Stack) -> None:
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0, token="forged")
        refused = stack.runtimes.sessions.refused
        for _ in range(200):  # bounded: the event is handled off this task
            if refused["event_not_authorized"]:
                break
            await asyncio.sleep(0.02)
        assert refused["event_not_authorized"] == 1
        with pytest.raises(TimeoutError):  # refused for authority: never acknowledged
            await runtime.acked(start.attempt_id, 1, timeout=1.0)
        assert await _display(stack, run_id) == "STARTING"
        assert "run.succeeded" not in await _types(stack, run_id)


async def test_unknown_runtime_token_is_refused(stack: Stack) -> None:
    runtime = ScriptedRuntime(stack.runtime, token="nope")
    with pytest.raises(Exception) as raised:
        await runtime.connect()
    await runtime.close()
    assert "UNAUTHENTICATED" in str(raised.value)


async def test_heartbeat_renews_the_lease_and_changes_nothing_else(stack: Stack) -> None:
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = await _accepted(runtime)
        before = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        await runtime.heartbeat(limit=1, active=[start.runtime_task_id])
        for _ in range(100):  # bounded: the heartbeat is applied off the event path
            after = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
            if after.current_attempt.HasField("heartbeat_time"):
                break
            await asyncio.sleep(0.05)
        assert after.current_attempt.HasField("heartbeat_time")
        assert after.version == before.version and after.display_state == before.display_state
        assert (
            after.current_attempt.lease_expire_time.ToMilliseconds()
            >= before.current_attempt.lease_expire_time.ToMilliseconds()
        )


async def test_missing_out_of_order_and_after_terminal_events_change_nothing(
    stack: Stack,
) -> None:
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_RUNNING)  # a gap: applied (seq > 1)
        await runtime.acked(start.attempt_id, 3)
        before = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        await runtime.event(start, 0, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)  # no seq
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_FAILED, exit_code=1)  # out of order
        await runtime.acked(start.attempt_id, 2)
        middle = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        assert middle.display_state == before.display_state == common_pb2.DISPLAY_STATE_RUNNING
        assert middle.version == before.version
        assert middle.current_attempt.last_event_seq == 3
        await runtime.event(start, 4, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
        await runtime.acked(start.attempt_id, 4)
        done = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        await runtime.event(start, 5, pb.RUNTIME_EVENT_TYPE_FAILED, exit_code=9)  # after terminal
        await runtime.acked(start.attempt_id, 5)
        final = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        assert final.display_state == common_pb2.DISPLAY_STATE_SUCCEEDED
        assert final.version == done.version and final.current_attempt.exit_code == 0
        ignored = [
            e
            for e in (
                await stack.runs.ListRunEvents(
                    rs.ListRunEventsRequest(run_id=run_id, page_size=500)
                )
            ).events
            if e.type == "attempt.late_callback_ignored"
        ]
        reasons = sorted(str(e.payload["ignored_because"]) for e in ignored)
        assert reasons == ["after_terminal", "duplicate_or_out_of_order", "missing_seq"]


async def test_failed_attempt_is_kept_and_a_new_one_is_queued(stack: Stack) -> None:
    run_id = await _submit(stack, max_attempts=2)
    async with _connected(stack) as runtime:
        first = (await runtime.expect("start")).start
        await runtime.answer_start(first, accepted=True)
        await runtime.event(first, 1, pb.RUNTIME_EVENT_TYPE_RUNNING)
        await runtime.event(first, 2, pb.RUNTIME_EVENT_TYPE_FAILED, exit_code=3)
        await runtime.acked(first.attempt_id, 2)
        assert await _display(stack, run_id) == "RETRY_WAIT"
        requeued = await RetryScheduler(stack.app.transitions, backoff_ms=0).run_once()
        assert requeued == 1
        second = (await runtime.expect("start")).start  # the new attempt is claimed and sent
        assert second.run_id == run_id and second.attempt_id != first.attempt_id
        assert second.runtime_task_id != first.runtime_task_id
        attempts = await stack.app.store.list_attempts(run_id)
        assert [(a.attempt_no, a.status.value, a.exit_code) for a in attempts] == [
            (1, "failed", 3),
            (2, "starting", None),
        ]


async def _answer_running(
    stack: Stack, runtime: ScriptedRuntime, start: pb.Start, run_id: str
) -> None:
    """Inspect answered "running, active turn"; the run then shows running."""
    await runtime.send_inspect_result(
        pb.InspectResult(
            attempt_id=start.attempt_id,
            runtime_task_id=start.runtime_task_id,
            state=pb.INSPECT_STATE_RUNNING,
            turn_status=pb.TURN_STATUS_ACTIVE,
        )
    )
    for _ in range(100):  # bounded: the answer is applied off the event path
        if await _display(stack, run_id) == "RUNNING":
            break
        await asyncio.sleep(0.05)
    assert await _display(stack, run_id) == "RUNNING"


async def test_unknown_attempt_is_inspected_and_the_answer_restores_the_truth(
    stack: Stack,
) -> None:
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = (await runtime.expect("start")).start
        # the Start's answer is lost: after the timeout the attempt is unknown, then inspected
        inspect = (await runtime.expect("inspect")).inspect
        assert inspect.attempt_id == start.attempt_id
        assert await _display(stack, run_id) == "UNKNOWN"
        await _answer_running(stack, runtime, start, run_id)
        # the runtime's own events still apply from seq 1: the answer used up no seq
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
        await runtime.acked(start.attempt_id, 1)
        assert await _display(stack, run_id) == "SUCCEEDED"


async def test_an_attempt_another_process_found_unknown_is_inspected_until_answered(
    stack: Stack, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split deployment: the reconciler process marks the attempt unknown, and the
    coordinator holding the runtime's stream never sees that commit. Its re-send scan still
    asks, again (growing gaps) while nothing is proven, and stops once the answer is in."""
    monkeypatch.setattr(dispatcher, "RESEND_SCAN_IDLE_S", 1.0)
    monkeypatch.setattr(dispatcher, "INSPECT_RESEND_FIRST_S", 1.0)
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = await _accepted(runtime, 2)
        elsewhere = await open_store(migrated_database_url)
        try:
            unknown = c.DispatchUnknown(run_id, RECONCILER, reason="lease_expired_after_start")
            await Transitions(elsewhere).execute(unknown)
        finally:
            await elsewhere.close()
        assert await _display(stack, run_id) == "UNKNOWN"
        clock = asyncio.get_running_loop().time
        arrivals = []
        for _ in range(3):  # the runtime answers nothing at first
            inspect = (await runtime.expect("inspect", timeout=4.0)).inspect
            assert (inspect.attempt_id, inspect.runtime_task_id) == (
                start.attempt_id,
                start.runtime_task_id,
            )
            arrivals.append(clock())
        first_gap, second_gap = arrivals[1] - arrivals[0], arrivals[2] - arrivals[1]
        assert 0.8 <= first_gap < 2.5 and 1.8 <= second_gap < 3.5, (first_gap, second_gap)
        await _answer_running(stack, runtime, start, run_id)
        runtime.seen.clear()
        with pytest.raises(TimeoutError):  # the next one would have come 4 s after the last
            await runtime.expect("inspect", timeout=5.0)


async def test_a_finished_task_still_running_on_the_runtime_is_an_orphan(stack: Stack) -> None:
    """Seed A §10: the runtime reports a task truerun holds finished: it is told to cancel
    it, the report is recorded (diverged), and truerun's state stays as it was."""
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = await _accepted(runtime, 2)
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
        await runtime.acked(start.attempt_id, 3)
        done = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        for _ in range(2):
            await runtime.heartbeat(limit=1, active=[start.runtime_task_id])
            cancel = (await runtime.expect("cancel")).cancel
            assert cancel.runtime_task_id == start.runtime_task_id
        after = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
        assert after.version == done.version
        assert after.display_state == common_pb2.DISPLAY_STATE_SUCCEEDED
        types = await _types(stack, run_id)
        assert types.count("attempt.orphan_reported") == 1


async def _inspected_not_found(stack: Stack, runtime: ScriptedRuntime) -> pb.Start:
    """The Start's answer is lost (unknown, inspected); the same live instance answers that it
    has no such task: the attempt is provably gone."""
    start = (await runtime.expect("start")).start
    inspect = (await runtime.expect("inspect")).inspect
    assert inspect.attempt_id == start.attempt_id
    await runtime.send_inspect_result(
        pb.InspectResult(
            attempt_id=start.attempt_id,
            runtime_task_id=start.runtime_task_id,
            state=pb.INSPECT_STATE_NOT_FOUND,
        )
    )
    return start


async def test_an_idempotent_run_whose_task_is_gone_gets_a_new_attempt(stack: Stack) -> None:
    """Issue #5: not found from the same live instance -> lost, then the retry policy: an
    idempotent task gets a new attempt (a counted recovery); the lost attempt is kept."""
    run_id = await _submit(stack, idempotent=True)
    async with _connected(stack) as runtime:
        first = await _inspected_not_found(stack, runtime)
        await runtime.heartbeat(limit=1)
        second = (await runtime.expect("start")).start  # the new attempt, claimed and sent
        assert second.run_id == run_id and second.attempt_id != first.attempt_id
        attempts = await stack.app.store.list_attempts(run_id)
        assert [(a.attempt_no, a.status.value) for a in attempts] == [
            (1, "lost"),
            (2, "starting"),
        ]
        assert attempts[0].termination_reason == "runtime_says_not_found"
        loaded = await stack.app.store.load(run_id)
        assert loaded is not None and loaded.run.recovery_count == 1
        types = await _types(stack, run_id)
        assert types.index("run.lost") < types.index("run.retrying")


async def test_a_non_idempotent_run_whose_task_is_gone_waits_for_a_person(stack: Stack) -> None:
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        first = await _inspected_not_found(stack, runtime)
        for _ in range(100):  # bounded: the answer is applied off the event path
            if await _display(stack, run_id) == "LOST":
                break
            await asyncio.sleep(0.05)
        assert await _display(stack, run_id) == "LOST"
        await runtime.heartbeat(limit=1)
        with pytest.raises(TimeoutError):
            await runtime.expect("start", timeout=1.5)
        attempts = await stack.app.store.list_attempts(run_id)
        assert [(a.id, a.status.value) for a in attempts] == [(first.attempt_id, "lost")]
        assert "run.retrying" not in await _types(stack, run_id)


async def test_an_unconfirmed_cancel_is_sent_again_with_growing_gaps(stack: Stack) -> None:
    """Issue #5: while the cancel is requested and unconfirmed the Cancel goes again, 1 s,
    then 2 s after the last one (each bound to the attempt by its runtime_task_id); once the
    runtime confirms, no more."""
    run_id = await _submit(stack)
    async with _connected(stack) as runtime:
        start = await _accepted(runtime, 2)
        await stack.runs.CancelRun(rs.CancelRunRequest(id=run_id))
        clock = asyncio.get_running_loop().time
        arrivals = []
        for _ in range(3):  # the runtime ignores the first three Cancels
            cancel = (await runtime.expect("cancel", timeout=5.0)).cancel
            arrivals.append(clock())
            assert (cancel.attempt_id, cancel.runtime_task_id) == (
                start.attempt_id,
                start.runtime_task_id,
            )
        first_gap, second_gap = arrivals[1] - arrivals[0], arrivals[2] - arrivals[1]
        assert 0.8 <= first_gap < 1.9, first_gap
        assert 1.8 <= second_gap < 3.5, second_gap
        assert second_gap > first_gap
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_CANCELLED, exit_code=-15)
        await runtime.acked(start.attempt_id, 3)
        assert await _display(stack, run_id) == "CANCELLED"
        runtime.seen.clear()
        with pytest.raises(TimeoutError):  # the next one would have come 4 s after the last
            await runtime.expect("cancel", timeout=5.0)


async def test_a_run_opts_into_self_fencing_through_its_spec(stack: Stack) -> None:
    """Issue #5: spec.self_fence_after_ms (validated at CreateRun) reaches the runtime as
    Start.self_fence_after_ms; a run that names none sends 0 (the agent's default applies)."""
    fenced = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="fenced")
    fenced.spec.update({"command": "sleep 30", "self_fence_after_ms": 1500})
    fenced_id = (await stack.runs.CreateRun(fenced)).run.id
    async with _connected(stack) as runtime:
        start = await _accepted(runtime)
        assert (start.run_id, start.self_fence_after_ms) == (fenced_id, 1500)
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
        await runtime.acked(start.attempt_id, 2)
        plain = await _submit(stack, "plain")
        await runtime.heartbeat(limit=1)
        other = (await runtime.expect("start")).start
        assert (other.run_id, other.self_fence_after_ms) == (plain, 0)
    for bad in (-1, 1.5, "300", True):
        request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="bad")
        request.spec.update({"command": "true", "self_fence_after_ms": bad})
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stack.runs.CreateRun(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad


async def _running_on(stack: Stack, instance: str, lineage: str, *runs: bool) -> list[pb.Start]:
    """Runs (idempotent or not) started and running on ``instance`` of ``lineage``; its
    stream then ends (the instance died with its tasks, as its lineage promises)."""
    run_ids = [  # one scope each: runs of one scope queue behind each other
        await _submit(stack, f"{instance}-{i}", idempotent=idempotent)
        for i, idempotent in enumerate(runs)
    ]
    runtime = ScriptedRuntime(stack.runtime, instance=instance, lineage=lineage)
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=len(runs))
        starts = [(await runtime.expect("start")).start for _ in runs]
        for start in starts:
            await runtime.answer_start(start, accepted=True)
            await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
            await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
            await runtime.acked(start.attempt_id, 2)
        by_run = {s.run_id: s for s in starts}
        return [by_run[run_id] for run_id in run_ids]
    finally:
        await _closed(stack, runtime)


async def _closed(stack: Stack, runtime: ScriptedRuntime) -> None:
    """Close the stream and wait (bounded) until the server has let go of the session."""
    await runtime.close()
    for _ in range(500):
        if stack.runtimes.sessions.get(runtime.instance) is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the server still holds {runtime.instance}'s session")


async def _replaced_by(stack: Stack, instance: str, lineage: str) -> ScriptedRuntime:
    runtime = ScriptedRuntime(stack.runtime, instance=instance, lineage=lineage)
    await runtime.connect()
    return runtime


async def test_a_new_instance_of_the_lineage_proves_the_old_ones_tasks_gone(
    stack: Stack,
) -> None:
    """Issue #5, "a new instance replaced it": the idempotent run's attempt is lost (the
    reason names both instances) and its new attempt is queued in the same transaction,
    before Welcome; the non-idempotent one stays lost for a person."""
    idem, once = await _running_on(stack, "pod-0.a", "pod-0", True, False)
    before = {s.run_id: await _display(stack, s.run_id) for s in (idem, once)}
    assert before == {idem.run_id: "RUNNING", once.run_id: "RUNNING"}
    runtime = await _replaced_by(stack, "pod-0.b", "pod-0")
    try:
        idem_attempts = await stack.app.store.list_attempts(idem.run_id)
        assert [(a.attempt_no, a.status.value) for a in idem_attempts] == [
            (1, "lost"),
            (2, "queued"),
        ]
        reason = idem_attempts[0].termination_reason or ""
        assert reason == "instance_replaced: pod-0.a by pod-0.b (lineage pod-0)"
        once_attempts = await stack.app.store.list_attempts(once.run_id)
        assert [(a.id, a.status.value) for a in once_attempts] == [(once.attempt_id, "lost")]
        assert await _display(stack, once.run_id) == "LOST"
        loaded = await stack.app.store.load(idem.run_id)
        assert loaded is not None and loaded.run.recovery_count == 1
        await runtime.heartbeat(limit=1)
        second = (await runtime.expect("start")).start  # the retry runs on the new instance
        assert second.run_id == idem.run_id and second.attempt_id == idem_attempts[1].id
    finally:
        await runtime.close()
    # The replaced instances are settled: a later Hello of the lineage finds nothing to do.
    assert await stack.app.store.record_lineage("alice", "pod-0.b", "pod-0", 0) == []


async def test_without_a_lineage_a_new_instance_proves_nothing(stack: Stack) -> None:
    """The reference agent's commands outlive it: an instance that said no lineage is never
    replaced, neither by an instance without one nor by one of some lineage."""
    (start,) = await _running_on(stack, "host-a", "", False)
    for instance, lineage in (("host-b", ""), ("pod-1.x", "pod-1")):
        runtime = ScriptedRuntime(stack.runtime, instance=instance, lineage=lineage)
        await runtime.connect()
        await _closed(stack, runtime)
    attempts = await stack.app.store.list_attempts(start.run_id)
    assert [a.status.value for a in attempts] == ["running"]


async def test_an_older_instance_coming_back_replaces_nobody(stack: Stack) -> None:
    """A replaced instance that reconnects (its lineage's promise broken) does not replace
    the newer one: the order is each instance's first Hello."""
    await _running_on(stack, "pod-2.old", "pod-2", True)
    newer = await _replaced_by(stack, "pod-2.new", "pod-2")
    try:
        await newer.heartbeat(limit=1)
        start = await _accepted(newer, 2)  # the retry, running on the newer instance
    finally:
        await _closed(stack, newer)
    older = await _replaced_by(stack, "pod-2.old", "pod-2")
    await _closed(stack, older)
    attempts = await stack.app.store.list_attempts(start.run_id)
    assert [a.status.value for a in attempts] == ["lost", "running"]


async def test_a_bad_lineage_is_refused_and_records_nothing(stack: Stack) -> None:
    runtime = ScriptedRuntime(stack.runtime, instance="pod-3.a", lineage="bad lineage!")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await runtime.connect()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await runtime.close()
    assert await stack.app.store.record_lineage("alice", "pod-3.b", "bad lineage!", 0) == []


async def test_a_lineage_belongs_to_one_owner(stack: Stack) -> None:
    (start,) = await _running_on(stack, "pod-4.a", "pod-4", True)
    other = ScriptedRuntime(stack.runtime, owner="bob", instance="pod-4.b", lineage="pod-4")
    await other.connect()
    await _closed(stack, other)
    attempts = await stack.app.store.list_attempts(start.run_id)
    assert [a.status.value for a in attempts] == ["running"]
