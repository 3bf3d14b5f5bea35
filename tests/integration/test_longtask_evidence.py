"""The evidence reader through real gRPC on loopback, on SQLite and PostgreSQL (seed C
"Testing Decisions", evidence access and dangling references; docs/long-tasks.md "Reading
evidence"): an attempt reads its own task's references, bounded per read and per attempt,
marked untrusted; another task's, owner's or project's id reads as missing; a gone target
answers its stored summary with the unavailable marker and fails nothing; the start-up check
marks it, and GetLongTask shows it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest
from truerun.v1 import long_task_service_pb2 as lt

from longtasks.service.evidence_reader import PER_ATTEMPT, PER_READ
from longtasks.service.evidence_sources import GONE, NOT_READABLE
from reconciler.output_retention import DAY_MS, OutputRetention
from services.bootstrap import broken_references
from tests.support.longtask_api import OWNER, PROJECT, create, get, refused, running, step_of
from tests.support.longtask_evidence import (
    complete,
    end_run,
    next_attempt,
    output_ref,
    print_output,
    read,
)
from tests.support.longtask_stack import LongTaskStack, longtask_stack, start_attempt
from tests.support.longtasks import read as sql_read
from truerun_runtime.longtask import LongTaskAttempt, LongTaskError

NOT_FOUND = (grpc.StatusCode.NOT_FOUND, "LONG_TASK_NOT_FOUND")


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


async def test_an_attempt_reads_its_own_evidence_bounded_per_read_and_per_attempt(
    stack: LongTaskStack,
) -> None:
    live = await running(stack)
    try:
        text, _ = await print_output(live, 4000)  # about 200 KB of its own run's output
        raw = text.encode()
        done = await complete(
            stack,
            live,
            "s1",
            [output_ref(live), lt.EvidenceRef(kind="file", reference="report.md", summary="12 KB")],
        )
        output_id, file_id = (e.evidence_id for e in done.step.evidence)
        etag = (await get(stack)).etag

        first = await read(stack, live, output_id)  # no max_bytes: the per-read limit
        assert first.untrusted and first.kind == "run_output" and first.summary == "the build log"
        assert first.content == raw[:PER_READ] and first.total_bytes == len(raw)
        assert first.truncated and first.truncated_by == "per_read"
        assert first.next_offset == PER_READ and first.unavailable_reason == ""
        small = await read(stack, live, output_id, offset=PER_READ, max_bytes=100)
        assert small.content == raw[PER_READ : PER_READ + 100]
        assert small.truncated and small.truncated_by == ""  # cut where the caller asked
        tail = await read(stack, live, output_id, offset=len(raw) - 10)
        assert tail.content == raw[-10:] and not tail.truncated

        # a file is on the runtime's machine: its summary, and why there is no content
        file = await read(stack, live, file_id)
        assert file.untrusted and file.summary == "12 KB" and file.content == b""
        assert file.unavailable_reason.startswith(NOT_READABLE) and not file.truncated

        # the cumulative limit: reads go on until the attempt's budget is spent, then cut
        left = first.attempt_bytes_left
        while left > 0:
            got = await read(stack, live, output_id)
            assert len(got.content) == min(PER_READ, left)
            left = got.attempt_bytes_left
        spent = await read(stack, live, output_id)
        assert spent.content == b"" and spent.truncated and spent.truncated_by == "per_attempt"
        [row] = await sql_read(
            stack.app.store,
            f"SELECT evidence_bytes_read FROM long_task_attempts WHERE id = '{live.attempt_id}'",
        )
        assert row["evidence_bytes_read"] == PER_ATTEMPT
        assert (await get(stack)).etag == etag  # reading changed nothing of the task
    finally:
        await live.runtime.close()


async def test_a_receipt_renders_from_the_stored_record_and_nothing_else_is_readable(
    stack: LongTaskStack,
) -> None:
    live = await running(stack)
    cred = live.credential
    try:
        await complete(stack, live, "s1", [lt.EvidenceRef(kind="file", reference="r", summary="r")])
        s2 = step_of(await get(stack), "s2")
        begun = await stack.attempts.BeginStep(
            lt.BeginStepRequest(credential=cred, step_id="s2", step_version=s2.version)
        )
        intent = await stack.attempts.RecordIntent(
            lt.RecordIntentRequest(
                credential=cred,
                step_id="s2",
                step_version=begun.step.version,
                target="team@example.org",
                summary="the weekly report",
            )
        )
        receipt = lt.Receipt(external_id="msg-42", target="team@example.org", summary="relayed")
        receipt.time.FromMilliseconds(1_764_000_000_000)
        got = await stack.attempts.RecordReceipt(
            lt.RecordReceiptRequest(
                credential=cred, step_id="s2", step_version=intent.step.version, receipt=receipt
            )
        )
        proof = lt.EvidenceRef(
            kind="receipt", reference="msg-42", summary="the relay took it", effect_id=got.made_id
        )
        done = await stack.attempts.CompleteStep(
            lt.CompleteStepRequest(
                credential=cred, step_id="s2", step_version=got.step.version, evidence=[proof]
            )
        )
        [evidence] = done.step.evidence
        content = await read(stack, live, evidence.evidence_id)
        assert content.untrusted and not content.truncated and content.unavailable_reason == ""
        assert b"external id: msg-42" in content.content and b"relayed" in content.content
        assert content.total_bytes == len(content.content)
        # the effect's own id, the decision log, the run: no evidence reference, no read
        for hidden in (intent.made_id, live.start.run_id, live.attempt_id):
            assert await refused(read(stack, live, hidden)) == NOT_FOUND
    finally:
        await live.runtime.close()


async def test_another_tasks_owners_or_projects_evidence_reads_as_missing(
    stack: LongTaskStack,
) -> None:
    mine = await running(stack)
    others = []
    try:
        await create(stack, start=True, long_task_id="lt-2", owner_id="carol")
        await create(stack, start=True, long_task_id="lt-3", project_id="elsewhere")
        ids = []
        for task_id, owner, project in (("lt-2", "carol", PROJECT), ("lt-3", OWNER, "elsewhere")):
            other = await start_attempt(stack, task_id, owner)
            others.append(other)
            ref = lt.EvidenceRef(kind="receipt", reference="x", summary=f"{task_id}'s")
            done = await complete(stack, other, "s1", [ref], task_id=task_id, project=project)
            ids.append(done.step.evidence[0].evidence_id)
            # its own attempt reads it (the receipt is not there: unavailable, still no error)
            own = await read(stack, other, ids[-1])
            assert own.summary == f"{task_id}'s" and own.unavailable_reason.startswith(GONE)
        missing = "01a23000-0000-7000-8000-0000000000ff"
        for evidence_id in (*ids, missing):
            assert await refused(read(stack, mine, evidence_id)) == NOT_FOUND
        # an evidence reference naming another task's run reads nothing of it either
        theirs = others[0]
        done = await complete(stack, mine, "s1", [output_ref(theirs, "not mine")])
        stolen = await read(stack, mine, done.step.evidence[0].evidence_id)
        assert stolen.content == b"" and stolen.unavailable_reason.startswith(NOT_READABLE)
    finally:
        for live in (mine, *others):
            await live.runtime.close()


async def test_a_target_deleted_under_a_live_task_is_unavailable_and_flagged_at_start(
    stack: LongTaskStack,
) -> None:
    first = await running(stack)
    try:
        _, seq = await print_output(first, 20)
        done = await complete(stack, first, "s1", [output_ref(first)])
        [ref] = done.step.evidence
        assert (await read(stack, first, ref.evidence_id)).content
        await end_run(first, seq)
    finally:
        await first.runtime.close()
    second = await next_attempt(stack, first, "the run ended")
    try:
        later = int(time.time() * 1000) + 2 * DAY_MS
        assert await OutputRetention(stack.app.transitions, 1, clock=lambda: later).run_once()
        gone = await read(stack, second, ref.evidence_id)  # the read does not fail
        assert gone.summary == "the build log" and gone.content == b"" and gone.untrusted
        assert gone.unavailable_reason.startswith(GONE)

        check = broken_references(stack.app)
        assert await check.run_once() == 1
        assert await check.run_once() == 0  # marked once
        task = await get(stack)
        s1 = step_of(task, "s1")
        assert s1.state == lt.STEP_STATE_COMPLETED  # the step is not failed
        [shown] = s1.evidence
        assert shown.unavailable and shown.unavailable_reason.startswith(GONE)
        assert shown.summary == "the build log"
        events = await stack.tasks.ListLongTaskEvents(
            lt.ListLongTaskEventsRequest(project_id=PROJECT, long_task_id="lt-1")
        )
        assert "evidence_unavailable" in [e.type for e in events.events]
        briefing = await stack.attempts.GetBriefing(
            lt.GetBriefingRequest(credential=second.credential)
        )
        [briefed] = step_of(briefing, "s1").evidence
        assert briefed.unavailable and briefed.summary == "the build log"
        assert (await read(stack, second, ref.evidence_id)).unavailable_reason.startswith(GONE)
        # and the attempt goes on with the next step
        s2 = step_of(task, "s2")
        begun = await stack.attempts.BeginStep(
            lt.BeginStepRequest(credential=second.credential, step_id="s2", step_version=s2.version)
        )
        assert begun.step.state == lt.STEP_STATE_RUNNING
    finally:
        await second.runtime.close()


async def test_the_sdk_reads_evidence_and_a_foreign_id_is_not_found(stack: LongTaskStack) -> None:
    live = await running(stack)
    try:
        text, _ = await print_output(live, 10)
        done = await complete(stack, live, "s1", [output_ref(live)])
        evidence_id = done.step.evidence[0].evidence_id
        start = live.start
        async with LongTaskAttempt(
            stack.address, start.run_id, start.attempt_id, start.callback_token
        ) as attempt:
            got = await attempt.read_evidence(evidence_id, max_bytes=20)
            assert got.content == text.encode()[:20] and got.untrusted and got.truncated
            rest = await attempt.read_evidence(evidence_id, offset=got.next_offset)
            assert got.content + rest.content == text.encode() and not rest.truncated
            with pytest.raises(LongTaskError) as error:
                await attempt.read_evidence("01a23000-0000-7000-8000-0000000000ff")
            assert error.value.reason == "LONG_TASK_NOT_FOUND"
    finally:
        await live.runtime.close()
