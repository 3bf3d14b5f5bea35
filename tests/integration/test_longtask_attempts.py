"""LongTaskAttemptService through real gRPC on loopback, on SQLite and PostgreSQL
(docs/long-tasks.md "API"): an attempt's briefing and step actions with the callback token
its runtime was given when its run was really claimed and started. Refusals carry their
stable reason and change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from truerun.v1 import long_task_service_pb2 as lt

from tests.support.longtask_api import (
    OWNER,
    PROJECT,
    get,
    refused,
    running,
    step_of,
    struct,
)
from tests.support.longtask_stack import (
    LongTaskStack,
    finish_run,
    longtask_stack,
    start_attempt,
)
from tests.support.longtasks import snapshot


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


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
    # written, never read back (test_longtask_report.py): exporting changed nothing
    assert (await get(stack)).etag == task.etag

    # a finished task goes on under a new plan version, never reopening its terminal state
    named: dict[str, Any] = {"project_id": PROJECT, "long_task_id": "lt-1"}
    more = lt.StepDraft(step_id="s4", title="tell the boss", side_effect=lt.SIDE_EFFECT_CLASS_PURE)
    continued = await stack.tasks.ContinueLongTask(
        lt.ContinueLongTaskRequest(**named, etag=task.etag, reason="and the boss", steps=[more])
    )
    assert continued.state == lt.LONG_TASK_STATE_QUEUED and continued.plan_version == 2
    assert [s.step_id for s in continued.steps] == ["s4"]
    assert continued.plan_versions[0].closed_state == "completed"


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


async def test_an_approval_is_asked_read_and_granted_while_the_attempt_keeps_its_lease(
    stack: LongTaskStack,
) -> None:
    live = await running(stack)
    cred = live.credential
    try:
        asked = await stack.attempts.RequestApproval(
            lt.RequestApprovalRequest(
                credential=cred,
                subject="send mail to team@example.org",
                question="May I send the report to the whole team?",
            )
        )
        assert asked.state == lt.LONG_TASK_STATE_WAITING_FOR_APPROVAL
        assert asked.decision.kind == "approval" and asked.decision.repeat_count == 1
        decision = lt.GetDecisionRequest(credential=cred, decision_id=asked.decision.decision_id)
        assert (await stack.attempts.GetDecision(decision)).state == "open"
        renewed = await stack.attempts.RenewLease(lt.RenewLeaseRequest(credential=cred))
        assert renewed.state == lt.LONG_TASK_STATE_WAITING_FOR_APPROVAL
        assert renewed.HasField("lease_expire_time")
        waiting = await get(stack)
        assert (waiting.display_state, waiting.wait_kind) == ("waiting_for_you", "approval")
        assert waiting.lease_attempt_id == live.attempt_id
        granted = await stack.tasks.AnswerDecision(
            lt.AnswerDecisionRequest(
                project_id=PROJECT,
                long_task_id="lt-1",
                decision_id=asked.decision.decision_id,
                etag=waiting.etag,
                answer="grant",
                note="fine by me",
            )
        )
        assert granted.state == lt.LONG_TASK_STATE_RUNNING
        answered = await stack.attempts.GetDecision(decision)
        assert (answered.state, answered.answer, answered.note) == (
            "answered",
            "grant",
            "fine by me",
        )
        missing = lt.GetDecisionRequest(credential=cred, decision_id="no-such-decision")
        assert await refused(stack.attempts.GetDecision(missing)) == (
            grpc.StatusCode.NOT_FOUND,
            "LONG_TASK_NOT_FOUND",
        )
    finally:
        await live.runtime.close()


async def test_block_uncertain_probe_and_fail_map_onto_the_door(stack: LongTaskStack) -> None:
    live = await running(stack)
    cred = live.credential

    async def act(rpc: Any, request_type: Any, step_id: str, **extra: Any) -> lt.StepAck:
        version = step_of(await get(stack), step_id).version
        request = request_type(credential=cred, step_id=step_id, step_version=version, **extra)
        ack: lt.StepAck = await rpc(request)
        return ack

    try:
        await act(stack.attempts.BeginStep, lt.BeginStepRequest, "s1")
        blocked = await act(stack.attempts.BlockStep, lt.BlockStepRequest, "s1", reason="no disk")
        assert blocked.step.state == lt.STEP_STATE_BLOCKED
        await act(stack.attempts.BeginStep, lt.BeginStepRequest, "s2")
        await act(
            stack.attempts.RecordIntent, lt.RecordIntentRequest, "s2", target="t", summary="s"
        )
        unsure = await act(
            stack.attempts.MarkStepUncertain, lt.MarkStepUncertainRequest, "s2", reason="timeout"
        )
        assert unsure.step.state == lt.STEP_STATE_UNCERTAIN
        before = await snapshot(stack.app.store)
        probe = act(
            stack.attempts.RecordProbe, lt.RecordProbeRequest, "s2", result=lt.PROBE_RESULT_DONE
        )
        assert await refused(probe) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "INVALID_STEP_TRANSITION",
        )  # a non-idempotent step has no probe
        unset = act(stack.attempts.RecordProbe, lt.RecordProbeRequest, "s2")
        assert (await refused(unset))[1] == "INVALID_ARGUMENT"
        assert await snapshot(stack.app.store) == before
        await act(stack.attempts.BeginStep, lt.BeginStepRequest, "s1")
        failed = await act(stack.attempts.FailStep, lt.FailStepRequest, "s1", reason="broken")
        assert failed.step.state == lt.STEP_STATE_FAILED
    finally:
        await live.runtime.close()
    events = await stack.tasks.ListLongTaskEvents(
        lt.ListLongTaskEventsRequest(project_id=PROJECT, long_task_id="lt-1")
    )
    runtime_events = [e for e in events.events if e.step_id]
    assert runtime_events and all(e.attempt_id == live.attempt_id for e in runtime_events)
