"""Retention keyed on task terminality, and the HTML export, on SQLite and PostgreSQL (seed C
"Testing Decisions", retention; docs/long-tasks.md "Retention and export"): a failed
attempt's evidence inside a live task stays readable by the next attempt however old the
task is; trimming applies only once the task is finished longer than the retention period,
and keeps the state changes, the criteria results and the summaries. The HTML report
escapes every stored string."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import grpc
import pytest
from truerun.v1 import long_task_service_pb2 as lt

from longtasks.domain.states import StepState
from longtasks.service.evidence_sources import GONE
from longtasks.service.inputs import NewEvidence
from longtasks.service.upkeep import TRIMMED
from reconciler.output_retention import DAY_MS
from services.bootstrap import long_task_retention, open_store
from tests.integration.test_longtask_reconciler import DEADLINE_S, reconciler, until
from tests.support.clock import Clock
from tests.support.longtask_api import PROJECT, create, get, refused, running, step_of, struct
from tests.support.longtask_evidence import (
    complete,
    end_run,
    next_attempt,
    output_ref,
    print_output,
    read,
)
from tests.support.longtask_stack import LongTaskStack, longtask_stack
from tests.support.longtasks import harness, step_version
from tests.support.longtasks import read as read_rows
from tests.support.longtasks import running as running_task

DAYS = 90


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


def _at(days: int) -> int:
    return int(time.time() * 1000 + days * DAY_MS)


async def _events(stack: LongTaskStack) -> list[lt.LongTaskEvent]:
    listed = await stack.tasks.ListLongTaskEvents(
        lt.ListLongTaskEventsRequest(project_id=PROJECT, long_task_id="lt-1")
    )
    return list(listed.events)


async def test_a_failed_attempts_evidence_stays_readable_and_trimming_waits_for_the_end(
    stack: LongTaskStack,
) -> None:
    first = await running(stack)
    try:
        text, seq = await print_output(first, 50)
        receipt_like = lt.EvidenceRef(
            kind="file", reference="report.md", summary="12 KB", render=struct(size=12_000)
        )
        done = await complete(stack, first, "s1", [output_ref(first), receipt_like])
        output_id = done.step.evidence[0].evidence_id
        await end_run(first, seq, exit_code=1)  # the attempt's process failed
    finally:
        await first.runtime.close()
    second = await next_attempt(stack, first, "the run failed")
    try:
        # a year later, the task still live: nothing is trimmed, the evidence reads
        for days in (1, 365):
            retention = long_task_retention(stack.app, DAYS, clock=partial(_at, days))
            assert await retention.run_once() == 0
        got = await read(stack, second, output_id)
        assert got.content == text.encode() and got.unavailable_reason == ""
    finally:
        await second.runtime.close()

    task = await get(stack)
    cancelled = await stack.tasks.CancelLongTask(
        lt.CancelLongTaskRequest(project_id=PROJECT, long_task_id="lt-1", etag=task.etag)
    )
    assert cancelled.state == lt.LONG_TASK_STATE_CANCELLED
    before = await _events(stack)
    assert any(not e.to_state for e in before)  # step and attempt notes besides moves
    # finished, but not longer ago than the period: kept as it is
    assert await long_task_retention(stack.app, DAYS, clock=lambda: _at(DAYS - 1)).run_once() == 0
    assert [e.sequence for e in await _events(stack)] == [e.sequence for e in before]

    retention = long_task_retention(stack.app, DAYS, clock=lambda: _at(DAYS + 1))
    assert await retention.run_once() == 1
    assert await retention.run_once() == 0  # trimmed once
    trimmed = await get(stack)
    # the compact summary and the acceptance outcome stay
    assert trimmed.state == lt.LONG_TASK_STATE_CANCELLED
    assert trimmed.state_reason == cancelled.state_reason
    assert [(c.criterion_id, c.result) for c in trimmed.criteria] == [
        (c.criterion_id, c.result) for c in cancelled.criteria
    ]
    s1 = step_of(trimmed, "s1")
    assert s1.state == lt.STEP_STATE_COMPLETED
    assert [e.summary for e in s1.evidence] == ["the build log", "12 KB"]
    assert all(e.unavailable and e.unavailable_reason == TRIMMED for e in s1.evidence)
    assert all(not e.render.fields for e in s1.evidence)
    after = await _events(stack)
    moves = [e.sequence for e in before if e.to_state]
    assert [e.sequence for e in after if e.to_state] == moves
    assert [e.type for e in after if not e.to_state] == ["retention_trimmed"]


async def test_the_html_export_escapes_every_stored_string(stack: LongTaskStack) -> None:
    goal = "<script>alert('x')</script> & report"
    await create(stack, goal=goal, constraints=["<b>bold</b>"])
    exported = await stack.tasks.ExportLongTask(
        lt.ExportLongTaskRequest(
            project_id=PROJECT, long_task_id="lt-1", format=lt.EXPORT_FORMAT_HTML
        )
    )
    html = exported.html
    assert exported.markdown == "" and html.startswith("<!DOCTYPE html>")
    assert "<script>" not in html and "<b>bold" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; report" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    markdown = await stack.tasks.ExportLongTask(
        lt.ExportLongTaskRequest(project_id=PROJECT, long_task_id="lt-1")
    )
    assert markdown.html == "" and markdown.markdown.startswith("# Long task lt-1")
    unknown = lt.ExportLongTaskRequest(project_id=PROJECT, long_task_id="lt-1")
    unknown.format = 7  # type: ignore[assignment]  # a value no client should send
    assert await refused(stack.tasks.ExportLongTask(unknown)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
    )


async def test_a_real_reconciler_marks_a_broken_reference_when_it_starts(
    migrated_database_url: str, tmp_path: Path
) -> None:
    """`truerun reconciler` as a process: a receipt reference whose receipt is not there is
    marked once at start (column + event); the file reference it cannot check, and the
    step, stay as they are."""
    store = await open_store(migrated_database_url)
    h = harness(store, Clock())
    started = await running_task(h)
    assert started.made is not None
    version = await step_version(h, "lt-1", "s1")
    begun = await h.door.begin_step("lt-1", started.made, "s1", version)
    assert begun.step is not None
    proofs = [
        NewEvidence("receipt", "msg-gone", "the relay took it"),
        NewEvidence("file", "r.md", "12 KB"),
    ]
    await h.door.complete_step("lt-1", started.made, "s1", begun.step.version, proofs)
    out = tmp_path / "reconciler.out"
    proc = reconciler(migrated_database_url, out)
    try:

        async def marked() -> bool:
            rows = await read_rows(
                store, "SELECT id FROM long_task_evidence WHERE unavailable_reason IS NOT NULL"
            )
            return bool(rows)

        await until("the broken reference marked", marked)
        rows = await read_rows(
            store, "SELECT kind, unavailable_reason FROM long_task_evidence ORDER BY kind"
        )
        assert [r["kind"] for r in rows] == ["file", "receipt"]
        assert rows[0]["unavailable_reason"] is None
        assert rows[1]["unavailable_reason"].startswith(GONE)
        events = [e.type for e in await h.sql.events("lt-1")]
        assert events.count("evidence_unavailable") == 1
        task = await h.sql.get_task("lt-1")
        assert task is not None
        [s1] = [s for s in await h.sql.steps(None, "lt-1", task.plan_version) if s.step_id == "s1"]
        assert s1.state is StepState.COMPLETED
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=DEADLINE_S)
        await store.close()
    assert code == 0, out.read_text()
