"""A re-sent or otherwise ignored event is acknowledged with the attempt's highest processed
seq (docs/runtime-protocol.md "What the server must do"), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url) as live:
        yield live


async def test_a_duplicate_is_acknowledged_with_the_highest_processed_seq(stack: Stack) -> None:
    await stack.runs.CreateRun(rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="t"))
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=1)
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        for seq, kind in ((1, pb.RUNTIME_EVENT_TYPE_ACCEPTED), (2, pb.RUNTIME_EVENT_TYPE_RUNNING)):
            await runtime.event(start, seq, kind)
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload={"text": "x"})
        await runtime.acked(start.attempt_id, 3)
        runtime.seen.clear()
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)  # re-sent, alone
        acks = (await runtime.expect("acks")).acks.acks
        assert [(a.attempt_id, a.seq) for a in acks] == [(start.attempt_id, 3)]
    finally:
        await runtime.close()
