"""Issue #11 §5 over a real gRPC stream, on SQLite and PostgreSQL: a runtime's output goes to
its own store, not the event log. 10 MB of output costs the event table what 6 bytes do; the
stored output reads back whole, page by page; past the cap a truncated marker, once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from coordinator.domain.output import OutputPolicy
from reconciler.output_retention import DAY_MS, OutputRetention
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime

CHUNK = 4096
LINE = "x" * 63 + "\n"  # 64 bytes: a chunk is 64 whole lines


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url) as live:
        yield live


async def _run_printing(stack: Stack, runtime: ScriptedRuntime, chunks: list[str]) -> str:
    """A run whose command printed ``chunks``, one OUTPUT event each, then succeeded."""
    run_id = (
        await stack.runs.CreateRun(
            rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="t")
        )
    ).run.id
    start = (await runtime.expect("start")).start
    await runtime.answer_start(start, accepted=True)
    await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
    offset = 0
    for seq, chunk in enumerate(chunks, start=3):
        payload = {"stream": "output", "data": chunk, "offset": offset}
        await runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload=payload)
        offset += len(chunk.encode())
    last = 3 + len(chunks)
    await runtime.event(start, last, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
    await runtime.acked(start.attempt_id, last, timeout=120)
    return str(run_id)


async def _event_types(stack: Stack, run_id: str) -> list[str]:
    page = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id, page_size=500))
    return [event.type for event in page.events]


async def _read_all(stack: Stack, run_id: str) -> tuple[str, rs.ReadRunOutputResponse]:
    text, offset = [], 0
    while True:
        page = await stack.runs.ReadRunOutput(
            rs.ReadRunOutputRequest(run_id=run_id, offset=offset, max_bytes=1 << 20)
        )
        assert all(len(chunk.text.encode()) for chunk in page.chunks)
        text += [chunk.text for chunk in page.chunks]
        if page.next_offset >= page.stored_bytes:
            return "".join(text), page
        assert page.next_offset > offset  # every page makes progress
        offset = page.next_offset


async def test_ten_megabytes_of_output_leave_the_event_table_within_a_constant_bound(
    stack: Stack,
) -> None:
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=2)
        small = await _run_printing(stack, runtime, ["hello\n"])
        big_chunks = [LINE * (CHUNK // len(LINE))] * (10 * 1024 * 1024 // CHUNK)
        big = await _run_printing(stack, runtime, big_chunks)
    finally:
        await runtime.close()
    small_types, big_types = await _event_types(stack, small), await _event_types(stack, big)
    print(f"run events: 6 bytes of output {len(small_types)}, 10 MiB {len(big_types)}")
    # 2,560 OUTPUT events; the event log got at most one more progress note than for 6 bytes
    assert len(big_chunks) == 2560
    assert len(small_types) <= len(big_types) <= len(small_types) + 1, big_types
    assert big_types.count("attempt.output_progressed") in (1, 2)
    text, last = await _read_all(stack, big)
    assert text == "".join(big_chunks) and len(text) == 10 * 1024 * 1024
    assert last.attempt_finished and last.run_finished and not last.truncated
    assert last.log_bytes == last.stored_bytes == len(text)
    assert (await _read_all(stack, small))[0] == "hello\n"


async def test_past_the_cap_one_truncated_marker_and_the_rest_is_not_stored(
    migrated_database_url: str,
) -> None:
    cap = 64 * 1024
    policy = OutputPolicy(max_bytes=cap, note_interval_ms=60_000)
    async with runtime_stack(migrated_database_url, output=policy) as stack:
        runtime = ScriptedRuntime(stack.runtime)
        await runtime.connect()
        try:
            await runtime.heartbeat(limit=1)
            chunks = [LINE * (CHUNK // len(LINE))] * 50  # 200 KiB
            run_id = await _run_printing(stack, runtime, chunks)
        finally:
            await runtime.close()
        text, last = await _read_all(stack, run_id)
        types = await _event_types(stack, run_id)
        page = await stack.runs.ReadRunOutput(
            rs.ReadRunOutputRequest(run_id=run_id, offset=cap - 10, max_bytes=1 << 20)
        )
    assert types.count("attempt.output_truncated") == 1
    assert last.truncated and last.log_bytes == 50 * CHUNK
    assert text.startswith(LINE * (cap // len(LINE)))
    kinds = [chunk.kind for chunk in page.chunks]
    assert kinds[-1] == rs.OUTPUT_CHUNK_KIND_TRUNCATED and kinds.count(kinds[-1]) == 1
    assert page.chunks[0].offset == cap - 10 and page.chunks[0].text == LINE[-10:]
    assert "cap of 65536 bytes" in page.chunks[-1].text


async def test_retention_deletes_the_output_of_attempts_ended_long_ago_and_readers_say_so(
    stack: Stack,
) -> None:
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=2)
        ended = await _run_printing(stack, runtime, ["old line\n"])
        create = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="live")
        live = (await stack.runs.CreateRun(create)).run.id
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_RUNNING)
        payload = {"data": "still running\n", "offset": 0}
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload=payload)
        await runtime.acked(start.attempt_id, 2)
    finally:
        await runtime.close()
    two_days_later = int(time.time() * 1000) + 2 * DAY_MS
    retention = OutputRetention(stack.app.transitions, 1, clock=lambda: two_days_later)
    assert await retention.run_once() == 1  # the ended attempt's one piece
    gone = await stack.runs.ReadRunOutput(rs.ReadRunOutputRequest(run_id=ended))
    assert gone.expired and not gone.chunks and gone.next_offset == gone.stored_bytes == 9
    kept = await stack.runs.ReadRunOutput(rs.ReadRunOutputRequest(run_id=live))
    assert [chunk.text for chunk in kept.chunks] == ["still running\n"] and not kept.expired
    assert await OutputRetention(stack.app.transitions, 0).run_once() == 0  # 0 = keep forever
