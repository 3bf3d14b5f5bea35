"""Issue #14's "Must show" families whose code exists, through the public API (gRPC
LongTaskService and LongTaskAttemptService on loopback, an attempt whose run was really
claimed by a scripted runtime), on SQLite and PostgreSQL, one live stack per database.

Most families were shown already by a test of their own; this module adds only what no
test showed through the public API, and this table says where the rest is:

| family | shown by |
|---|---|
| budget: exhaustion -> ``partial`` with the reason and the met/unmet criteria | test_longtask_usage_rpc.py::test_usage_is_shown_counted_once_and_the_used_up_budget_stops_the_task |
| quota: the owner's unfinished cap refuses a create | test_longtask_service.py::test_an_owner_past_the_unfinished_cap_creates_nothing |
| quota: the owner's active cap queues in creation order, position shown, no lease, never "running" | **here**: test_the_owners_active_cap_queues_in_creation_order_with_its_position |
| evidence: own refs read, per-read and cumulative truncation flagged | test_longtask_evidence.py::test_an_attempt_reads_its_own_evidence_bounded_per_read_and_per_attempt |
| evidence: another task's/owner's/project's ref refused | test_longtask_evidence.py::test_another_tasks_owners_or_projects_evidence_reads_as_missing |
| evidence: no hidden debug/control records | test_longtask_evidence.py::test_a_receipt_renders_from_the_stored_record_and_nothing_else_is_readable |
| approval: asked, read, granted while the attempt holds its lease | test_longtask_attempts.py::test_an_approval_is_asked_read_and_granted_while_the_attempt_keeps_its_lease |
| approval: the grant dies with its attempt (real processes killed) | tests/faults/test_longtask_recovery.py::test_waiting_for_approval_the_grant_expires_with_its_attempt_and_is_asked_again |
| approval: exact action once with its receipt, the next attempt asks again, "request 2" in the task view and ``/longtask list``, granted from there | **here**: test_a_grant_dies_with_its_attempt_and_the_repeat_is_asked_in_the_task_view |
| handles: per-owner, never reused, stable | test_longtask_actions.py::test_handles_numbered_per_owner_and_never_given_twice, ::test_concurrent_creates_take_distinct_handles |
| handles: another owner's guessed handle refused | test_longtask_actions.py::test_another_owners_handle_is_refused_by_authorization |
| handles: ambiguous text refused, a single pending short answer taken | test_longtask_actions.py::test_text_command_refuses_to_guess_and_acts_on_one, ::test_short_yes_grants_the_one_open_approval |
| dangling reference: target deleted under a live task, attempt goes on, step not failed, "evidence unavailable" in the view, flagged at start | test_longtask_evidence.py::test_a_target_deleted_under_a_live_task_is_unavailable_and_flagged_at_start, test_longtask_retention.py::test_a_real_reconciler_marks_a_broken_reference_when_it_starts |
| retention: a failed attempt's evidence read by the next attempt, trimmed only after terminal | test_longtask_retention.py::test_a_failed_attempts_evidence_stays_readable_and_trimming_waits_for_the_end |
"""  # noqa: E501

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from truerun.v1 import long_task_service_pb2 as lt

from longtasks.service.watcher import LongTaskWatcher
from services.bootstrap import longtask_watcher_sql
from tests.support.databases import create_pg_database, drop_pg_database
from tests.support.longtask_api import OWNER, PROJECT, create, get, step_of
from tests.support.longtask_stack import LiveAttempt, LongTaskStack, longtask_stack, start_attempt

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(
    scope="module",
    loop_scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
async def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LongTaskStack]:
    """One live stack per database for the whole module (tests use owners of their own)."""
    if request.param == "postgres":
        url = await create_pg_database()
    else:
        url = f"sqlite:///{Path(tmp_path_factory.mktemp('acceptance')) / 'truerun.db'}"
    try:
        async with longtask_stack(url) as live:
            yield live
    finally:
        if request.param == "postgres":
            await drop_pg_database(url)


def text(message: str, action_id: str = "") -> lt.TextCommandRequest:
    return lt.TextCommandRequest(
        project_id=PROJECT, owner_id=OWNER, text=message, action_id=action_id
    )


async def test_the_owners_active_cap_queues_in_creation_order_with_its_position(
    stack: LongTaskStack,
) -> None:
    watcher = LongTaskWatcher(stack.door, longtask_watcher_sql(stack.app.store), "t", 1)
    ids = ("cap-1", "cap-2", "cap-3")
    for task_id in ids:
        await create(stack, start=True, long_task_id=task_id, owner_id="cara")
    await create(stack, start=True, long_task_id="cap-dan", owner_id="dan")
    started = await watcher.run_once()
    assert sorted(started.started) == ["cap-1", "cap-dan"]  # one slot each, oldest first
    assert (await watcher.run_once()).started == []  # a full owner starts nothing more

    first, second, third = [await get(stack, t) for t in ids]
    assert first.state == lt.LONG_TASK_STATE_RUNNING and first.lease_attempt_id
    for waiting, ahead in ((second, 0), (third, 1)):
        assert waiting.state == lt.LONG_TASK_STATE_QUEUED
        assert waiting.queue_position == ahead
        assert waiting.lease_attempt_id == "" and not waiting.attempts
        assert waiting.display_state == "queued"  # never shown as running
    assert (await get(stack, "cap-dan")).state == lt.LONG_TASK_STATE_RUNNING

    await stack.tasks.CancelLongTask(
        lt.CancelLongTaskRequest(project_id=PROJECT, long_task_id="cap-1", etag=first.etag)
    )
    assert (await watcher.run_once()).started == ["cap-2"]  # the slot goes by creation
    assert (await get(stack, "cap-3")).queue_position == 0
    for task_id in ("cap-2", "cap-3", "cap-dan"):  # nothing of this test left to start
        task = await get(stack, task_id)
        await stack.tasks.CancelLongTask(
            lt.CancelLongTaskRequest(project_id=PROJECT, long_task_id=task_id, etag=task.etag)
        )


async def _ask_to_send(stack: LongTaskStack, live: LiveAttempt) -> lt.Decision:
    """The attempt begins the email step and asks to send (before any intent)."""
    version = step_of(await get(stack, "ap-1"), "s2").version
    await stack.attempts.BeginStep(
        lt.BeginStepRequest(credential=live.credential, step_id="s2", step_version=version)
    )
    asked = await stack.attempts.RequestApproval(
        lt.RequestApprovalRequest(
            credential=live.credential,
            subject="send mail to team@example.org",
            question="May I send the report to the whole team?",
        )
    )
    assert asked.state == lt.LONG_TASK_STATE_WAITING_FOR_APPROVAL
    return asked.decision


async def test_a_grant_dies_with_its_attempt_and_the_repeat_is_asked_in_the_task_view(
    stack: LongTaskStack,
) -> None:
    created = await create(stack, start=True, long_task_id="ap-1")
    handle = created.handle  # "#1"
    first = await start_attempt(stack, "ap-1", OWNER)
    try:
        asked = await _ask_to_send(stack, first)
        assert asked.repeat_count == 1
        [shown] = [d for d in (await get(stack, "ap-1")).decisions if d.state == "open"]
        assert f"/longtask approve {handle}" in shown.prompt and "request 2" not in shown.prompt
        granted = await stack.tasks.TextCommand(text("yes", "chat-1"))  # the one open decision
        assert granted.outcome == "done"
        assert granted.long_task.state == lt.LONG_TASK_STATE_RUNNING
    finally:
        await first.runtime.close()
    # the attempt dies before its intent (as the watcher ends it when its run ended)
    await stack.door.attempt_ended("ap-1", first.attempt_id, "its run ended lost")
    queued = await get(stack, "ap-1")
    assert queued.state == lt.LONG_TASK_STATE_QUEUED
    assert not step_of(queued, "s2").effects  # nothing was sent

    second = await start_attempt(stack, "ap-1", OWNER)
    try:
        again = await _ask_to_send(stack, second)  # the grant was attempt 1's: asked again
        assert again.repeat_count == 2 and again.decision_id != asked.decision_id
        view = await get(stack, "ap-1")
        [open_now] = [d for d in view.decisions if d.state == "open"]
        assert "[request 2 for the same permission]" in open_now.prompt
        assert f"/longtask approve {handle}" in open_now.prompt
        listing = await stack.tasks.TextCommand(text("/longtask list"))
        assert "request 2 for the same permission" in listing.reply and handle in listing.reply
        approve = f"/longtask approve {handle} {view.etag}"
        approved = await stack.tasks.TextCommand(text(approve, "chat-2"))
        assert approved.outcome == "done", approved.reply
        redelivered = await stack.tasks.TextCommand(text(approve, "chat-2"))
        assert redelivered.outcome == "already_done"

        cred = second.credential
        version = step_of(await get(stack, "ap-1"), "s2").version
        intent = await stack.attempts.RecordIntent(
            lt.RecordIntentRequest(
                credential=cred,
                step_id="s2",
                step_version=version,
                target="team@example.org",
                summary="the weekly report",
            )
        )
        receipt = lt.Receipt(external_id="msg-7", target="team@example.org", summary="queued")
        receipt.time.FromMilliseconds(1_764_000_000_000)
        got = await stack.attempts.RecordReceipt(
            lt.RecordReceiptRequest(
                credential=cred, step_id="s2", step_version=intent.step.version, receipt=receipt
            )
        )
        await stack.attempts.CompleteStep(
            lt.CompleteStepRequest(credential=cred, step_id="s2", step_version=got.step.version)
        )
    finally:
        await second.runtime.close()
    done = await get(stack, "ap-1")
    [effect] = step_of(done, "s2").effects  # the exact action, once, with its receipt
    assert effect.receipt.external_id == "msg-7" and effect.target == "team@example.org"
    approvals = [d for d in done.decisions if d.kind == "approval"]
    assert sorted((d.repeat_count, d.answer) for d in approvals) == [(1, "grant"), (2, "grant")]
