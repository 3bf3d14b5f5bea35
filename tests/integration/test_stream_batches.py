"""The batched stream (docs/runtime-protocol.md "The stream"): a claim round's Starts in one
Starts message to a runtime that said it reads them, single Starts to one that did not; a
RuntimeEvents message's events each checked, applied and acknowledged on its own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from coordinator.api.runtime_servicer import MAX_EVENTS_PER_CALL
from tests.integration.test_run_service_grpc import error_info
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime, runtime_event

ACCEPTED = pb.RUNTIME_EVENT_TYPE_ACCEPTED
RUNNING = pb.RUNTIME_EVENT_TYPE_RUNNING
SUCCEEDED = pb.RUNTIME_EVENT_TYPE_SUCCEEDED
OUTPUT = pb.RUNTIME_EVENT_TYPE_OUTPUT


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url) as live:
        yield live


async def _submit(stack: Stack, count: int) -> list[str]:
    ids = []
    for n in range(count):
        request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id=f"t{n}")
        ids.append((await stack.runs.CreateRun(request)).run.id)
    return ids


@contextlib.asynccontextmanager
async def _runtime(stack: Stack, limit: int, batches: bool) -> AsyncIterator[ScriptedRuntime]:
    runtime = ScriptedRuntime(stack.runtime, accepts_batches=batches)
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=limit)
        yield runtime
    finally:
        await runtime.close()


async def _run_to_the_end(stack: Stack, runtime: ScriptedRuntime, count: int) -> list[str]:
    """Answers ``count`` Starts, runs each to success; returns their attempt ids."""
    starts = [(await runtime.expect("start")).start for _ in range(count)]
    for start in starts:
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, ACCEPTED)
        await runtime.event(start, 2, SUCCEEDED, exit_code=0)
    for start in starts:
        await runtime.acked(start.attempt_id, 2)
    return [s.attempt_id for s in starts]


async def _display(stack: Stack, run_id: str) -> int:
    return (await stack.runs.GetRun(rs.GetRunRequest(id=run_id))).display_state


@pytest.mark.parametrize("batches", [True, False], ids=["batch-capable", "older runtime"])
async def test_a_round_of_several_claims_is_one_starts_message_only_when_asked(
    stack: Stack, batches: bool
) -> None:
    runs = await _submit(stack, 3)
    async with _runtime(stack, limit=3, batches=batches) as runtime:
        attempts = await _run_to_the_end(stack, runtime, 3)
        assert runtime.start_messages == ([3] if batches else [1, 1, 1])
        assert len(set(attempts)) == 3, "each attempt started once"
        for run_id in runs:
            assert await _display(stack, run_id) == common_pb2.DISPLAY_STATE_SUCCEEDED
            page = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))
            assert [e.type for e in page.events].count("attempt.start_requested") <= 1


async def test_a_refused_event_in_a_batch_is_not_acked_and_the_others_stand(
    stack: Stack,
) -> None:
    runs = await _submit(stack, 3)
    async with _runtime(stack, limit=3, batches=True) as runtime:
        starts = {}
        for _ in range(3):
            start = (await runtime.expect("start")).start
            starts[start.run_id] = start
        for start in starts.values():
            await runtime.answer_start(start, accepted=True)
            await runtime.event(start, 1, ACCEPTED)
        for start in starts.values():
            await runtime.acked(start.attempt_id, 1)
        good, bad, running = (starts[r] for r in runs)
        before = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=bad.run_id))
        runtime.seen.clear()
        await runtime.batch(
            [
                runtime_event(good, 2, SUCCEEDED, exit_code=0),
                runtime_event(bad, 2, SUCCEEDED, exit_code=0, token="not-the-callback-token"),
                runtime_event(running, 2, RUNNING),
            ]
        )
        acks = (await runtime.expect("acks")).acks.acks
        assert sorted((a.attempt_id, a.seq) for a in acks) == sorted(
            [(good.attempt_id, 2), (running.attempt_id, 2)]
        ), "one micro-batch: the good events acked together, the refused one not"
        assert await _display(stack, good.run_id) == common_pb2.DISPLAY_STATE_SUCCEEDED
        assert await _display(stack, running.run_id) == common_pb2.DISPLAY_STATE_RUNNING
        assert await _display(stack, bad.run_id) == common_pb2.DISPLAY_STATE_WAITING_RUNTIME
        after = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=bad.run_id))
        assert after.events == before.events, "the refused event changed nothing"
        assert stack.runtimes.sessions.refused["event_not_authorized"] == 1


async def test_more_than_the_most_items_in_one_message_is_refused_whole(stack: Stack) -> None:
    """A RuntimeEvents message of more than MAX_EVENTS_PER_CALL events ends the stream with
    INVALID_ARGUMENT before any of it is buffered: nothing applied, nothing acked. The same
    number in two messages is applied in bounded micro-batches, all of it acked."""
    (run_id,) = await _submit(stack, 1)
    async with _runtime(stack, limit=1, batches=True) as runtime:
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, ACCEPTED)
        await runtime.acked(start.attempt_id, 1)
        before = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))
        lines = [
            runtime_event(start, seq, OUTPUT, payload={"text": f"line {seq}\n"})
            for seq in range(2, MAX_EVENTS_PER_CALL + 3)
        ]
        await runtime.batch(lines)  # one item too many
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runtime.expect("acks")
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(refused.value).reason == "INVALID_ARGUMENT"
        assert stack.runtimes.sessions.refused["events_batch_too_large"] == 1
        after = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))
        assert after.events == before.events, "nothing of the refused message was applied"

    async with _runtime(stack, limit=1, batches=True) as again:  # reconnected: in two halves
        half = len(lines) // 2
        await again.batch(lines[:half])
        await again.batch(lines[half:])
        await again.acked(start.attempt_id, lines[-1].seq)
        assert stack.runtimes.sessions.refused["events_batch_too_large"] == 1
        await again.event(start, lines[-1].seq + 1, SUCCEEDED, exit_code=0)
        await again.acked(start.attempt_id, lines[-1].seq + 1)
    assert await _display(stack, run_id) == common_pb2.DISPLAY_STATE_SUCCEEDED


async def test_more_than_the_most_start_results_in_one_message_is_refused(stack: Stack) -> None:
    async with _runtime(stack, limit=1, batches=True) as runtime:
        answers = [
            pb.StartResult(attempt_id=f"att-{n}", accepted=True, seq=1)
            for n in range(MAX_EVENTS_PER_CALL + 1)
        ]
        await runtime.send(pb.ConnectRequest(start_results=pb.StartResults(results=answers)))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runtime.expect("acks")
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert stack.runtimes.sessions.refused["start_results_batch_too_large"] == 1
