"""Issue #37 over a real runtime stream, on SQLite and PostgreSQL: a run row no reader can
render (written before the input bounds existed, inserted straight into the table) never
stops dispatch: the other runs are claimed and started, the poisoned one goes out with the
note in place of its spec (the runtime refuses it as an invalid spec) and every reader still
answers; no dispatch task dies. And a runtime event whose payload passes an input bound is
refused: nothing written, acknowledged so that it is not sent again."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import json_format
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from tests.gateway.test_input_bounds import NESTED_5000, _write_spec, nested
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url) as live:
        yield live


async def _create(stack: Stack, task: str) -> str:
    request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id=task)
    request.spec.update({"command": "true"})
    return (await stack.runs.CreateRun(request)).run.id


async def test_an_unrenderable_row_never_stops_the_dispatch_of_other_runs(
    stack: Stack, migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    deeper, deep = await _create(stack, "poisoned-1"), await _create(stack, "poisoned-2")
    await _write_spec(migrated_database_url, deeper, NESTED_5000.decode())
    await _write_spec(migrated_database_url, deep, json.dumps({"x": nested(60)}))
    good = await _create(stack, "good")
    caplog.set_level(logging.WARNING)

    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    await runtime.heartbeat(limit=3)
    starts: dict[str, pb.Start] = {}
    while good not in starts or len(starts) < 3:
        start = (await runtime.expect("start")).start
        starts[start.run_id] = start
    assert json_format.MessageToDict(starts[good].spec) == {"command": "true"}
    for poisoned in (deeper, deep):
        assert list(json_format.MessageToDict(starts[poisoned].spec)) == ["truerun_note"]
        await runtime.answer_start(starts[poisoned], accepted=False, reason="no command")
    await runtime.answer_start(starts[good], accepted=True)
    await runtime.event(starts[good], 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await runtime.event(starts[good], 2, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
    await runtime.acked(starts[good].attempt_id, 2)

    done = await stack.runs.GetRun(rs.GetRunRequest(id=good))
    assert done.display_state == common_pb2.DISPLAY_STATE_SUCCEEDED
    listed = await stack.runs.ListRuns(rs.ListRunsRequest())
    assert {r.id for r in listed.runs} == {good, deep, deeper}
    for poisoned in (deeper, deep):
        shown = await stack.runs.GetRun(rs.GetRunRequest(id=poisoned))
        assert "cannot be shown" in shown.spec.fields["truerun_note"].string_value
    # nothing failed on the way: no claim round, no start task (kernel/loops.py counts both)
    failed = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failed, [r.getMessage() for r in failed]
    await runtime.close()


async def test_an_event_payload_past_a_bound_is_refused_and_writes_nothing(stack: Stack) -> None:
    run_id = await _create(stack, "t")
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    assert start.run_id == run_id
    await runtime.answer_start(start, accepted=True)
    await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await runtime.acked(start.attempt_id, 1)

    async def events() -> list[str]:
        page = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))
        return [e.type for e in page.events]

    before = await events()
    refused: list[dict[str, Any]] = [
        {"text": "y" * (16 * 1024 + 1)},  # a string past TRUERUN_INPUT_MAX_STRING
        {"reason": nested(20)},  # deeper than TRUERUN_INPUT_MAX_DEPTH
        {"text": "z", "many": list(range(1001))},  # more items than TRUERUN_INPUT_MAX_ITEMS
    ]
    for seq, payload in enumerate(refused, start=2):
        await runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload=payload)
    await runtime.acked(start.attempt_id, 1 + len(refused))
    assert await events() == before

    # within the bounds: written
    await runtime.event(start, 5, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload={"text": "hello\n"})
    await runtime.acked(start.attempt_id, 5)
    assert len(await events()) > len(before)
    await runtime.close()
