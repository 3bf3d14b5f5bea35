"""LongTaskService and LongTaskAttemptService through real gRPC on loopback, on SQLite and
PostgreSQL (docs/long-tasks.md "API"): a person's commands with the task's etag, an
attempt's step actions with the callback token its runtime was given when its run was
really claimed and started. Refusals carry their stable reason and change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from truerun.v1 import long_task_service_pb2 as lt

from tests.integration.test_run_service_grpc import error_info
from tests.support.longtask_stack import (
    LiveAttempt,
    LongTaskStack,
    finish_run,
    longtask_stack,
    start_attempt,
)
from tests.support.longtasks import snapshot

PROJECT, OWNER = "proj", "alice"


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


def struct(**values: Any) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


def draft(task_id: str = "lt-1", **overrides: Any) -> lt.LongTaskDraft:
    """Three steps (pure, non-idempotent, idempotent) and two criteria (a runtime checker,
    required; a subjective one, optional)."""
    values: dict[str, Any] = {
        "project_id": PROJECT,
        "long_task_id": task_id,
        "owner_id": OWNER,
        "goal": "send the weekly report to the team",
        "constraints": ["no attachments over 5 MB"],
        "steps": [
            lt.StepDraft(
                step_id="s1",
                title="write the report",
                side_effect=lt.SIDE_EFFECT_CLASS_PURE,
                action=struct(run="make report.md", receipt="none"),
            ),
            lt.StepDraft(
                step_id="s2",
                title="send the email",
                side_effect=lt.SIDE_EFFECT_CLASS_NON_IDEMPOTENT,
            ),
            lt.StepDraft(
                step_id="s3",
                title="archive it",
                side_effect=lt.SIDE_EFFECT_CLASS_IDEMPOTENT,
                idempotency_key="archive-1",
            ),
        ],
        "criteria": [
            lt.CriterionDraft(
                criterion_id="c1",
                text="the report file exists",
                checker_kind="file_exists",
                checker=struct(path="report.md"),
            ),
            lt.CriterionDraft(criterion_id="c2", text="the report reads well", optional=True),
        ],
    }
    values.update(overrides)
    return lt.LongTaskDraft(**values)


async def create(stack: LongTaskStack, start: bool = False, **overrides: Any) -> lt.LongTask:
    request = lt.CreateLongTaskRequest(long_task=draft(**overrides), start=start)
    return await stack.tasks.CreateLongTask(request)


async def get(stack: LongTaskStack, task_id: str = "lt-1") -> lt.LongTask:
    return await stack.tasks.GetLongTask(
        lt.GetLongTaskRequest(project_id=PROJECT, long_task_id=task_id)
    )


async def refused(
    call: Callable[[], Awaitable[Any]] | Awaitable[Any],
) -> tuple[grpc.StatusCode, str]:
    """The code and ErrorInfo reason of a call that must fail (a call, or what makes one)."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await (call() if callable(call) else call)
    return error.value.code(), error_info(error.value).reason


async def running(stack: LongTaskStack) -> LiveAttempt:
    await create(stack, start=True)
    return await start_attempt(stack, "lt-1", OWNER)


def step_of(task: lt.LongTask | lt.Briefing, step_id: str) -> lt.LongTaskStep:
    return next(s for s in task.steps if s.step_id == step_id)


async def test_create_get_and_list(stack: LongTaskStack) -> None:
    planned = await create(stack)
    assert planned.state == lt.LONG_TASK_STATE_PLANNED and planned.etag == "1"
    assert planned.name == "projects/proj/longTasks/lt-1" and planned.created_by == "tester"
    assert [s.step_id for s in planned.steps] == ["s1", "s2", "s3"]
    assert [s.state for s in planned.steps] == [lt.STEP_STATE_PENDING] * 3
    assert planned.steps[0].action["run"] == "make report.md"
    assert planned.steps[2].idempotency_key == "archive-1"
    assert [(c.criterion_id, c.required, c.subjective) for c in planned.criteria] == [
        ("c1", True, False),
        ("c2", False, True),
    ]
    assert planned.criteria[0].checker["path"] == "report.md"
    assert list(planned.constraints) == ["no attachments over 5 MB"]
    assert [p.version for p in planned.plan_versions] == [1]
    queued = await create(stack, start=True, long_task_id="lt-2", owner_id="bea")
    assert queued.state == lt.LONG_TASK_STATE_QUEUED and queued.display_state == "queued"
    assert (await get(stack)) == planned

    listed = await stack.tasks.ListLongTasks(lt.ListLongTasksRequest(project_id=PROJECT))
    assert [t.long_task_id for t in listed.long_tasks] == ["lt-2", "lt-1"]
    assert not listed.long_tasks[0].steps and listed.next_page_token == ""
    first = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, page_size=1)
    )
    rest = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, page_size=1, page_token=first.next_page_token)
    )
    assert [t.long_task_id for t in [*first.long_tasks, *rest.long_tasks]] == ["lt-2", "lt-1"]
    assert rest.next_page_token == ""
    alices = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, owner_id=OWNER)
    )
    assert [t.long_task_id for t in alices.long_tasks] == ["lt-1"]
    cancelled = await stack.tasks.CancelLongTask(
        lt.CancelLongTaskRequest(project_id=PROJECT, long_task_id="lt-2", etag=queued.etag)
    )
    assert cancelled.state == lt.LONG_TASK_STATE_CANCELLED
    active = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, active_only=True)
    )
    assert [t.long_task_id for t in active.long_tasks] == ["lt-1"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": []}, "at least one step"),
        ({"steps": [lt.StepDraft(step_id="a", title="t")]}, "side_effect is required"),
        (
            {
                "steps": [
                    lt.StepDraft(step_id="a", title="t", side_effect=lt.SIDE_EFFECT_CLASS_PURE),
                    lt.StepDraft(step_id="a", title="u", side_effect=lt.SIDE_EFFECT_CLASS_PURE),
                ]
            },
            "given twice: a",
        ),
        ({"goal": ""}, "goal is required"),
        ({"goal": "g" * 9000}, "goal is longer"),
        (
            {"criteria": [lt.CriterionDraft(criterion_id="c", text="t", checker_kind="magic")]},
            "unknown checker",
        ),
    ],
)
async def test_a_malformed_task_is_refused_and_nothing_is_written(
    stack: LongTaskStack, change: dict[str, Any], message: str
) -> None:
    before = await snapshot(stack.app.store)
    request = lt.CreateLongTaskRequest(long_task=draft(**change), start=True)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stack.tasks.CreateLongTask(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (error.value.details() or "")
    assert await snapshot(stack.app.store) == before


async def test_a_stale_etag_is_a_version_conflict_and_changes_nothing(
    stack: LongTaskStack,
) -> None:
    planned = await create(stack)
    started = await stack.tasks.StartLongTask(
        lt.StartLongTaskRequest(project_id=PROJECT, long_task_id="lt-1", etag=planned.etag)
    )
    assert started.state == lt.LONG_TASK_STATE_QUEUED and started.etag != planned.etag
    before = await snapshot(stack.app.store)
    named: dict[str, Any] = {"project_id": PROJECT, "long_task_id": "lt-1", "etag": planned.etag}
    for call in (
        lambda: stack.tasks.PauseLongTask(lt.PauseLongTaskRequest(**named)),
        lambda: stack.tasks.CancelLongTask(lt.CancelLongTaskRequest(**named)),
        lambda: stack.tasks.RevisePlan(lt.RevisePlanRequest(**named, reason="r")),
        lambda: stack.tasks.EditCriterion(
            lt.EditCriterionRequest(**named, criterion_id="c1", waive=True)
        ),
    ):
        assert await refused(call) == (grpc.StatusCode.ABORTED, "LONG_TASK_VERSION_CONFLICT")
    assert await snapshot(stack.app.store) == before


async def test_another_projects_caller_finds_nothing_and_changes_nothing(
    stack: LongTaskStack,
) -> None:
    planned = await create(stack)
    before = await snapshot(stack.app.store)
    named = {"project_id": PROJECT, "long_task_id": "lt-1"}
    for call in (
        lambda: stack.bobs.GetLongTask(lt.GetLongTaskRequest(**named)),
        lambda: stack.bobs.StartLongTask(lt.StartLongTaskRequest(**named, etag=planned.etag)),
        lambda: stack.bobs.ExportLongTask(lt.ExportLongTaskRequest(**named)),
        # the task's id under a project the caller does see is no task either
        lambda: stack.tasks.GetLongTask(
            lt.GetLongTaskRequest(project_id="elsewhere", long_task_id="lt-1")
        ),
    ):
        assert await refused(call) == (grpc.StatusCode.NOT_FOUND, "LONG_TASK_NOT_FOUND")
    assert await snapshot(stack.app.store) == before


async def test_a_wrong_callback_token_is_unauthenticated_and_changes_nothing(
    stack: LongTaskStack,
) -> None:
    live = await running(stack)
    try:
        s1 = step_of(await get(stack), "s1")
        good = live.credential
        wrong = [
            lt.AttemptCredential(
                run_id=good.run_id, run_attempt_id=good.run_attempt_id, callback_token="guess"
            ),
            lt.AttemptCredential(run_id=good.run_id, run_attempt_id=good.run_attempt_id),
            # the right token with another run's attempt id (a well-formed UUID)
            lt.AttemptCredential(
                run_id=good.run_id,
                run_attempt_id="01a23000-0000-7000-8000-000000000001",
                callback_token=good.callback_token,
            ),
        ]
        before = await snapshot(stack.app.store)
        for credential in wrong:
            begin = lt.BeginStepRequest(
                credential=credential, step_id="s1", step_version=s1.version
            )
            assert await refused(stack.attempts.BeginStep(begin)) == (
                grpc.StatusCode.UNAUTHENTICATED,
                "UNAUTHENTICATED",
            )
            briefing = lt.GetBriefingRequest(credential=credential)
            assert (await refused(stack.attempts.GetBriefing(briefing)))[1] == ("UNAUTHENTICATED")
        assert await snapshot(stack.app.store) == before
    finally:
        await live.runtime.close()


async def test_an_attempt_without_the_lease_is_refused(stack: LongTaskStack) -> None:
    """Paused by a person: the attempt's lease is released (its run cancelled); its token
    still proves who it is, but no step action of it lands."""
    live = await running(stack)
    try:
        task = await get(stack)
        paused = await stack.tasks.PauseLongTask(
            lt.PauseLongTaskRequest(project_id=PROJECT, long_task_id="lt-1", etag=task.etag)
        )
        assert paused.state == lt.LONG_TASK_STATE_PAUSED and paused.lease_attempt_id == ""
        before = await snapshot(stack.app.store)
        begin = lt.BeginStepRequest(
            credential=live.credential, step_id="s1", step_version=step_of(task, "s1").version
        )
        assert await refused(lambda: stack.attempts.BeginStep(begin)) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "LONG_TASK_LEASE_NOT_HELD",
        )
        renew = lt.RenewLeaseRequest(credential=live.credential)
        assert (await refused(lambda: stack.attempts.RenewLease(renew)))[1] == (
            "LONG_TASK_LEASE_NOT_HELD"
        )
        assert await snapshot(stack.app.store) == before
    finally:
        await live.runtime.close()


async def test_an_attempt_works_through_its_steps_to_completion_and_the_export_shows_it(
    stack: LongTaskStack,
) -> None:
    live = await running(stack)
    cred = live.credential
    try:
        briefing = await stack.attempts.GetBriefing(lt.GetBriefingRequest(credential=cred))
        assert (briefing.attempt_id, briefing.attempt_no) == (live.attempt_id, 1)
        assert briefing.goal == "send the weekly report to the team"
        assert briefing.current_step_id == "s1" and briefing.previous_failure == ""
        assert briefing.state == lt.LONG_TASK_STATE_RUNNING
        assert briefing.HasField("lease_expire_time")
        assert [c.criterion_id for c in briefing.criteria] == ["c1", "c2"]

        async def begin(step_id: str) -> lt.StepAck:
            version = step_of(await get(stack), step_id).version
            return await stack.attempts.BeginStep(
                lt.BeginStepRequest(credential=cred, step_id=step_id, step_version=version)
            )

        ack = await begin("s1")
        assert ack.step.state == lt.STEP_STATE_RUNNING
        assert ack.step.holder_attempt_id == live.attempt_id
        done = await stack.attempts.CompleteStep(
            lt.CompleteStepRequest(
                credential=cred,
                step_id="s1",
                step_version=ack.step.version,
                evidence=[lt.EvidenceRef(kind="file", reference="report.md", summary="12 KB")],
            )
        )
        assert done.step.state == lt.STEP_STATE_COMPLETED
        assert [e.reference for e in done.step.evidence] == ["report.md"]

        ack = await begin("s2")
        intent = await stack.attempts.RecordIntent(
            lt.RecordIntentRequest(
                credential=cred,
                step_id="s2",
                step_version=ack.step.version,
                target="team@example.org",
                summary="the weekly report",
            )
        )
        assert intent.made_id and intent.step.current_effect.effect_id == intent.made_id
        assert not intent.step.current_effect.HasField("receipt")
        receipt = lt.Receipt(
            external_id="msg-42", target="team@example.org", summary="accepted by the relay"
        )
        receipt.time.FromMilliseconds(1_764_000_000_000)
        got = await stack.attempts.RecordReceipt(
            lt.RecordReceiptRequest(
                credential=cred, step_id="s2", step_version=intent.step.version, receipt=receipt
            )
        )
        assert got.step.current_effect.receipt.external_id == "msg-42"
        completed = await stack.attempts.CompleteStep(
            lt.CompleteStepRequest(credential=cred, step_id="s2", step_version=got.step.version)
        )
        assert completed.step.state == lt.STEP_STATE_COMPLETED

        s3 = step_of(await get(stack), "s3")  # not needed: skipped without beginning it
        await stack.attempts.SkipStep(
            lt.SkipStepRequest(
                credential=cred, step_id="s3", step_version=s3.version, reason="archived"
            )
        )
        after = await stack.attempts.GetBriefing(lt.GetBriefingRequest(credential=cred))
        assert after.current_step_id == ""

        ready = await stack.attempts.ReadyForVerification(
            lt.ReadyForVerificationRequest(credential=cred)
        )
        assert ready.state == lt.LONG_TASK_STATE_VERIFYING
        before = await snapshot(stack.app.store)
        for source in ("judge", "user", "checker:file_sha256", "checker:receipt_present"):
            claim = lt.RecordVerificationRequest(
                credential=cred,
                verdicts=[
                    lt.Verdict(criterion_id="c1", source=source, result=lt.CRITERION_RESULT_PASSED)
                ],
            )
            assert await refused(stack.attempts.RecordVerification(claim)) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_ARGUMENT",
            ), source
        assert await snapshot(stack.app.store) == before
        verified = await stack.attempts.RecordVerification(
            lt.RecordVerificationRequest(
                credential=cred,
                verdicts=[
                    lt.Verdict(
                        criterion_id="c1",
                        source="checker:file_exists",
                        result=lt.CRITERION_RESULT_PASSED,
                        evidence=[
                            lt.EvidenceRef(kind="file", reference="report.md", summary="exists")
                        ],
                    )
                ],
            )
        )
        assert verified.state == lt.LONG_TASK_STATE_COMPLETED
    finally:
        await live.runtime.close()

    task = await get(stack)
    assert task.state == lt.LONG_TASK_STATE_COMPLETED and task.display_state == "completed"
    s2 = step_of(task, "s2")
    assert [e.receipt.summary for e in s2.effects] == ["accepted by the relay"]
    assert task.criteria[0].result == lt.CRITERION_RESULT_PASSED
    assert task.criteria[0].result_source == "checker"
    assert [a.outcome for a in task.attempts] == ["verified"]
    events = await stack.tasks.ListLongTaskEvents(
        lt.ListLongTaskEventsRequest(project_id=PROJECT, long_task_id="lt-1")
    )
    sequences = [e.sequence for e in events.events]
    assert sequences == list(range(1, len(sequences) + 1))
    moves = [(e.from_state, e.to_state) for e in events.events if e.to_state]
    assert moves[-1] == ("verifying", "completed")

    export = await stack.tasks.ExportLongTask(
        lt.ExportLongTaskRequest(project_id=PROJECT, long_task_id="lt-1")
    )
    report = export.markdown
    assert report.startswith("# Long task lt-1")
    assert "send the weekly report to the team" in report
    assert "[msg-42]" in report and "accepted by the relay" in report
    assert "team@example.org" in report and "**completed**" in report


async def test_a_decision_is_answered_once(stack: LongTaskStack) -> None:
    live = await running(stack)
    try:
        asked = await stack.attempts.RequestDecision(
            lt.RequestDecisionRequest(
                credential=live.credential,
                question="Send to the whole team or only the leads?",
                options=["team", "leads"],
                material=struct(draft="report.md"),
            )
        )
        await finish_run(live)  # the attempt asked a person: its process exits
    finally:
        await live.runtime.close()
    assert asked.state == lt.LONG_TASK_STATE_WAITING_FOR_USER
    assert list(asked.decision.options) == ["team", "leads"]
    waiting = await get(stack)
    assert (waiting.display_state, waiting.wait_kind) == ("waiting_for_you", "decision")
    decision_id = asked.decision.decision_id
    answer = lt.AnswerDecisionRequest(
        project_id=PROJECT,
        long_task_id="lt-1",
        decision_id=decision_id,
        etag=waiting.etag,
        answer="leads",
    )
    answered = await stack.tasks.AnswerDecision(answer)
    assert answered.state == lt.LONG_TASK_STATE_QUEUED
    [decision] = answered.decisions
    assert (decision.state, decision.answer, decision.answered_by) == (
        "answered",
        "leads",
        "tester",
    )
    before = await snapshot(stack.app.store)
    again = lt.AnswerDecisionRequest(
        project_id=PROJECT,
        long_task_id="lt-1",
        decision_id=decision_id,
        etag=answered.etag,
        answer="team",
    )
    code, reason = await refused(lambda: stack.tasks.AnswerDecision(again))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert reason == "INVALID_LONG_TASK_TRANSITION"
    assert await snapshot(stack.app.store) == before
    # the next attempt's briefing carries the answer, from the stored record
    nxt = await start_attempt(stack, "lt-1", OWNER)
    try:
        briefing = await stack.attempts.GetBriefing(
            lt.GetBriefingRequest(credential=nxt.credential)
        )
    finally:
        await nxt.runtime.close()
    assert briefing.attempt_no == 2 and briefing.previous_failure == "asked a person"
    assert [(d.decision_id, d.answer) for d in briefing.decisions] == [(decision_id, "leads")]


async def test_editing_a_criterion_is_a_users_plan_version(stack: LongTaskStack) -> None:
    planned = await create(stack)
    named: dict[str, Any] = {"project_id": PROJECT, "long_task_id": "lt-1"}
    both = lt.EditCriterionRequest(
        **named, etag=planned.etag, criterion_id="c1", waive=True, text="x"
    )
    assert (await refused(lambda: stack.tasks.EditCriterion(both)))[1] == "INVALID_ARGUMENT"
    waived = await stack.tasks.EditCriterion(
        lt.EditCriterionRequest(**named, etag=planned.etag, criterion_id="c1", waive=True)
    )
    assert waived.plan_version == 2
    c1, c2 = waived.criteria
    assert (c1.required, c1.author, c1.user_edited) == (False, "user", True)
    assert (c2.text, c2.required) == ("the report reads well", False)
    assert waived.plan_versions[-1].reason == "criterion c1 waived"
    reworded = await stack.tasks.EditCriterion(
        lt.EditCriterionRequest(
            **named, etag=waived.etag, criterion_id="c2", text="a colleague approves it"
        )
    )
    assert reworded.criteria[1].text == "a colleague approves it"
    assert reworded.criteria[1].user_edited and reworded.plan_version == 3
