"""Issue #11 §2 over a real gRPC stream, on SQLite and PostgreSQL: evidence counts only from
the principal it belongs to. Mallory holds a valid runtime token, for her own owner; Alice's
runtime runs Alice's run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from tests.integration.test_run_service_grpc import error_info
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime

ALICE, MALLORY = "alice-token", "mallory-token"


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    tokens = {ALICE: "alice", MALLORY: "mallory"}
    async with runtime_stack(migrated_database_url, owners_by_token=tokens) as live:
        yield live


async def _running(stack: Stack) -> tuple[ScriptedRuntime, pb.Start]:
    """Alice's runtime (instance inst-1) runs Alice's run; the run shows running."""
    await stack.runs.CreateRun(rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="t"))
    alice = ScriptedRuntime(stack.runtime, owner="alice", instance="inst-1", token=ALICE)
    await alice.connect()
    await alice.heartbeat(limit=1)
    start = (await alice.expect("start")).start
    await alice.answer_start(start, accepted=True)
    await alice.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await alice.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
    await alice.acked(start.attempt_id, 2)
    await alice.heartbeat(limit=1, active=[start.runtime_task_id])
    return alice, start


async def _run(stack: Stack, run_id: str) -> common_pb2.Run:
    return await stack.runs.GetRun(rs.GetRunRequest(id=run_id))


async def _types(stack: Stack, run_id: str) -> list[str]:
    page = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id, page_size=500))
    return [e.type for e in page.events]


async def test_a_hello_naming_another_owners_instance_is_refused(stack: Stack) -> None:
    alice, start = await _running(stack)
    mallory = ScriptedRuntime(stack.runtime, owner="mallory", instance="inst-1", token=MALLORY)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await mallory.connect()
    await mallory.close()
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_info(refused.value).reason == "RUNTIME_INSTANCE_OF_ANOTHER_OWNER"
    # Alice's stream is still hers: her events are applied and acknowledged.
    await alice.event(start, 3, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
    await alice.acked(start.attempt_id, 3)
    run = await _run(stack, start.run_id)
    assert run.display_state == common_pb2.DISPLAY_STATE_SUCCEEDED
    assert stack.runtimes.sessions.refused["hello_instance_of_another_owner"] == 1
    await alice.close()


async def test_another_owners_task_ids_and_unasked_answers_are_evidence_of_nothing(
    stack: Stack,
) -> None:
    alice, start = await _running(stack)
    await alice.event(start, 3, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
    await alice.acked(start.attempt_id, 3)
    before = await _types(stack, start.run_id)

    mallory = ScriptedRuntime(stack.runtime, owner="mallory", instance="m-1", token=MALLORY)
    await mallory.connect()
    for _ in range(3):  # her heartbeats name Alice's finished task as running on her side
        await mallory.heartbeat(limit=2, active=[start.runtime_task_id])
    await mallory.send_inspect_result(
        pb.InspectResult(
            attempt_id=start.attempt_id,
            runtime_task_id=start.runtime_task_id,
            state=pb.INSPECT_STATE_NOT_FOUND,
        )
    )
    refused = stack.runtimes.sessions.refused
    for _ in range(200):  # bounded: the stream's messages are handled in order
        if refused["inspect_answer_not_asked"] >= 1:
            break
        await asyncio.sleep(0.02)
    assert refused["heartbeat_task_of_another_owner"] == 3
    assert refused["inspect_answer_not_asked"] == 1
    with pytest.raises(TimeoutError):  # no Cancel for a task that is not hers
        await mallory.expect("cancel", timeout=0.5)
    assert await _types(stack, start.run_id) == before  # nothing written to Alice's run
    run = await _run(stack, start.run_id)
    assert run.display_state == common_pb2.DISPLAY_STATE_SUCCEEDED
    await mallory.close()
    await alice.close()


async def test_events_signed_with_another_owners_token_change_nothing(stack: Stack) -> None:
    """Mallory copies Alice's attempt id, task id and even the callback token into events on
    her own stream: refused (wrong owner and instance), never acknowledged, never applied."""
    alice, start = await _running(stack)
    mallory = ScriptedRuntime(stack.runtime, owner="mallory", instance="m-1", token=MALLORY)
    await mallory.connect()
    await mallory.event(start, 3, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
    refused = stack.runtimes.sessions.refused
    for _ in range(200):  # bounded: the event is handled off this task
        if refused["event_not_authorized"] >= 1:
            break
        await asyncio.sleep(0.02)
    assert refused["event_not_authorized"] == 1
    with pytest.raises(TimeoutError):
        await mallory.acked(start.attempt_id, 3, timeout=1.0)
    run = await _run(stack, start.run_id)
    assert run.display_state == common_pb2.DISPLAY_STATE_RUNNING
    assert run.current_attempt.last_event_seq == 2
    await mallory.close()
    await alice.close()
