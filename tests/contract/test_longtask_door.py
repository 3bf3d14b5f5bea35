"""The long-task door's methods on SQLite and real PostgreSQL, each one's happy path with
the rows it wrote (docs/long-tasks.md "Store and door")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coordinator.domain.states import RunStatus
from kernel.errors import InvalidLongTaskTransition, LongTaskLeaseNotHeld
from longtasks.domain.completion import Source
from longtasks.domain.model import StepDraft
from longtasks.domain.states import (
    AttemptOutcome,
    CriterionResult,
    DecisionKind,
    DecisionState,
    PlanAuthor,
    SideEffect,
    StepState,
    TaskState,
)
from longtasks.service.inputs import Intent, NewCriterion, NewEvidence, ReceiptIn, VerdictIn
from services.bootstrap import open_store
from tests.support.clock import Clock
from tests.support.longtasks import (
    ANA,
    SCHEDULER,
    Harness,
    harness,
    new_task,
    running,
    step_version,
)

T, S = TaskState, StepState


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


async def steps_of(h: Harness, task_id: str = "lt-1") -> dict[str, object]:
    task = await h.sql.get_task(task_id)
    assert task is not None
    return {s.step_id: s for s in await h.sql.steps(None, task_id, task.plan_version)}


async def test_create_writes_the_task_its_plan_steps_criteria_and_first_event(h: Harness) -> None:
    created = await h.door.create(new_task(), ANA)
    task = await h.sql.get_task("lt-1")
    assert task == created.task
    assert (task.state, task.state_version, task.plan_version) == (T.PLANNED, 1, 1)
    assert task.created_by == "ana" and task.lease is None
    [plan] = await h.sql.plans("lt-1")
    assert (plan.version, plan.author, plan.closed_state) == (1, PlanAuthor.USER, None)
    steps = await h.sql.steps(None, "lt-1", 1)
    assert [(s.step_id, s.position, s.state, s.version) for s in steps] == [
        ("s1", 1, S.PENDING, 1),
        ("s2", 2, S.PENDING, 1),
        ("s3", 3, S.PENDING, 1),
    ]
    assert steps[2].idempotency_key == "archive-1"
    c1, c2 = await h.sql.criteria(None, "lt-1", 1)
    assert (c1.criterion.checker, c1.criterion.subjective, c1.criterion.required) == (
        "file_exists",
        False,
        True,
    )
    assert (c2.criterion.subjective, c2.criterion.required, c2.result) == (
        True,
        False,
        CriterionResult.UNPROVEN,
    )
    assert c1.checker_spec == '{"path": "r.md"}'
    assert [(e.sequence, e.type, e.to_state) for e in await h.sql.events("lt-1")] == [
        (1, "create", "planned")
    ]
    display = await h.sql.task_display("lt-1")
    assert display["constraints"] == ["no attachments over 5 MB"]


async def test_start_attempt_creates_and_links_its_run_and_takes_the_lease(h: Harness) -> None:
    started = await running(h)
    task = started.task
    assert task.state is T.RUNNING and task.state_version == 3
    assert started.made is not None and started.run_id is not None
    assert task.lease is not None and task.lease.attempt_id == started.made
    assert task.lease.run_id == started.run_id
    assert task.budget.attempts_used == 1
    [attempt] = await h.sql.attempts(None, "lt-1")
    assert (attempt.id, attempt.attempt_no, attempt.run_id) == (started.made, 1, started.run_id)
    assert await h.sql.attempt_of_run(started.run_id) == attempt
    loaded = await h.store.load(started.run_id)
    assert loaded is not None
    run = loaded.run
    assert (run.task_id, run.max_attempts, run.trigger_type) == ("lt-1", 1, "long_task")
    assert run.spec["long_task"] == {
        "id": "lt-1",
        "attempt_id": started.made,
        "attempt_no": 1,
        "plan_version": 1,
    }
    assert [e.type for e in await h.sql.events("lt-1")][-1] == "attempt_started"


async def test_a_step_with_an_effect_begins_records_intent_and_receipt_and_completes(
    h: Harness,
) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    d = h.door
    r = await d.begin_step("lt-1", attempt, "s1", 1)
    assert r.step is not None and (r.step.state, r.step.holder, r.step.version) == (
        S.RUNNING,
        attempt,
        2,
    )
    evidence = NewEvidence("file", "artifact://r.md", "report, 2 KiB", '{"sha256": "ab"}')
    r = await d.complete_step("lt-1", attempt, "s1", 2, [evidence])
    assert r.step is not None and r.step.state is S.COMPLETED and r.step.holder is None
    [bound] = await h.sql.evidence(None, "lt-1")
    assert (bound.step_id, bound.criterion_id, bound.reference) == ("s1", None, "artifact://r.md")
    await d.begin_step("lt-1", attempt, "s2", 1)
    r = await d.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "the report"))
    effect_id = r.made
    assert r.step is not None and r.step.intent_id == effect_id
    r = await d.record_receipt(
        "lt-1", attempt, "s2", 3, ReceiptIn("mail:boss", h.clock.now, "250 OK", "msg-42")
    )
    assert r.step is not None and r.step.receipt_id == effect_id
    [effect] = await h.sql.effects(None, "lt-1")
    assert (effect.target, effect.try_no, effect.attempt_id) == ("mail:boss", 1, attempt)
    assert effect.receipt is not None and effect.receipt.external_id == "msg-42"
    r = await d.complete_step("lt-1", attempt, "s2", 4)  # the receipt is its evidence
    assert r.step is not None and r.step.state is S.COMPLETED
    assert [e.type for e in await h.sql.events("lt-1")] == [
        "create",
        "enqueue",
        "attempt_started",
        "step_begin",
        "step_complete",
        "step_begin",
        "step_record_intent",
        "step_record_receipt",
        "step_complete",
    ]


async def test_uncertain_block_fail_and_skip(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    d = h.door
    await d.begin_step("lt-1", attempt, "s1", 1)
    r = await d.mark_uncertain("lt-1", attempt, "s1", 2, "lost track")
    assert r.step is not None and r.step.state is S.UNCERTAIN
    r = await d.begin_step("lt-1", attempt, "s1", 3)  # pure: running it again is harmless
    assert r.step is not None
    assert (r.step.state, r.step.attempt_count, r.step.basis) == (S.RUNNING, 2, "class_safe")
    r = await d.block_step("lt-1", attempt, "s1", 4, "the disk is full")
    assert r.step is not None and r.step.state is S.BLOCKED
    r = await d.skip_step("lt-1", attempt, "s2", 1, "not needed this week")
    assert r.step is not None and r.step.state is S.SKIPPED
    await d.begin_step("lt-1", attempt, "s3", 1)
    r = await d.fail_step("lt-1", attempt, "s3", 2, "archive is gone")
    assert r.step is not None and r.step.state is S.FAILED


async def test_a_question_ends_the_attempt_and_its_answer_queues_the_task(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    r = await h.door.request_decision("lt-1", attempt, "Which mailbox?", ["work", "home"])
    assert r.task.state is T.WAITING_FOR_USER and r.task.lease is None
    assert r.decision is not None and r.decision.kind is DecisionKind.QUESTION
    [a] = await h.sql.attempts(None, "lt-1")
    assert a.outcome is AttemptOutcome.ASKED_USER and a.ended_at_ms == h.clock.now
    answered = await h.door.answer("lt-1", r.decision.id, r.task.state_version, ANA, "work")
    assert answered.task.state is T.QUEUED
    [d] = await h.sql.decisions(None, "lt-1")
    assert (d.state, d.answer, d.answered_by) == (DecisionState.ANSWERED, "work", "ana")
    again = await h.door.start_attempt("lt-1", SCHEDULER, answered.task.state_version)
    assert again.task.state is T.RUNNING and again.run_id != a.run_id


async def test_an_approval_keeps_the_lease_counts_repeats_and_its_answer_goes_on(
    h: Harness,
) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    d = h.door
    asked = await d.request_approval("lt-1", attempt, "send:boss", "Send it to the boss?")
    assert asked.task.state is T.WAITING_FOR_APPROVAL and asked.task.lease is not None
    assert asked.decision is not None and asked.decision.repeat_count == 1
    granted = await d.answer("lt-1", asked.decision.id, asked.task.state_version, ANA, "grant")
    assert granted.task.state is T.RUNNING
    again = await d.request_approval("lt-1", attempt, "send:boss", "Send it to the boss?")
    assert again.decision is not None and again.decision.repeat_count == 2
    denied = await d.answer("lt-1", again.decision.id, again.task.state_version, ANA, "deny")
    assert denied.task.state is T.RUNNING and denied.task.lease is not None


async def test_pause_cancels_the_run_and_the_next_attempt_waits_for_the_last_to_end(
    h: Harness,
) -> None:
    started = await running(h)
    assert started.run_id is not None and started.made is not None
    paused = await h.door.pause("lt-1", started.task.state_version, ANA, "holiday")
    assert paused.task.state is T.PAUSED and paused.task.lease is None
    loaded = await h.store.load(started.run_id)
    assert loaded is not None and loaded.run.status is RunStatus.CANCELLED
    resumed = await h.door.resume("lt-1", paused.task.state_version, ANA)
    assert resumed.task.state is T.QUEUED
    with pytest.raises(InvalidLongTaskTransition) as refused:
        await h.door.start_attempt("lt-1", SCHEDULER, resumed.task.state_version)
    assert refused.value.metadata["refusal"] == "ATTEMPT_OPEN"
    ended = await h.door.attempt_ended("lt-1", started.made, "run cancelled")
    assert ended.task.state is T.QUEUED
    [a] = await h.sql.attempts(None, "lt-1")
    assert a.outcome is AttemptOutcome.RUN_ENDED
    again = await h.door.start_attempt("lt-1", SCHEDULER, ended.task.state_version)
    assert again.task.state is T.RUNNING and again.task.budget.attempts_used == 2


async def test_cancel_expires_the_open_decisions_and_finishes_the_task(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    asked = await h.door.request_decision("lt-1", attempt, "Which mailbox?")
    cancelled = await h.door.cancel("lt-1", asked.task.state_version, ANA, "not needed")
    assert cancelled.task.state is T.CANCELLED
    assert cancelled.task.finished_at_ms == h.clock.now
    [d] = await h.sql.decisions(None, "lt-1")
    assert d.state is DecisionState.EXPIRED


async def test_revise_plan_writes_a_new_version_and_closes_the_old_one(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    done = await h.door.complete_step("lt-1", attempt, "s1", 2, [NewEvidence("f", "a://1", "x")])
    revised = await h.door.revise_plan(
        "lt-1",
        done.task.state_version,
        ANA,
        "send it to the team too",
        PlanAuthor.MODEL,
        steps=[
            StepDraft("s1", "write the report", SideEffect.PURE),
            StepDraft("s2", "send the email to the team", SideEffect.NON_IDEMPOTENT),
            StepDraft("s4", "post a note", SideEffect.QUERYABLE),
        ],
    )
    assert (revised.task.plan_version, revised.task.state) == (2, T.RUNNING)
    old, new = await h.sql.plans("lt-1")
    assert (old.closed_state, new.author, new.reason) == (
        T.RUNNING,
        PlanAuthor.MODEL,
        "send it to the team too",
    )
    steps = await h.sql.steps(None, "lt-1", 2)
    assert [(s.step_id, s.state, s.version, s.introduced_in) for s in steps] == [
        ("s1", S.COMPLETED, 3, 1),
        ("s2", S.PENDING, 2, 1),
        ("s4", S.PENDING, 1, 2),
    ]
    assert len(await h.sql.steps(None, "lt-1", 1)) == 3  # the old version is kept
    assert [c.criterion.id for c in await h.sql.criteria(None, "lt-1", 2)] == ["c1", "c2"]


async def _all_done(h: Harness, attempt: str) -> int:
    for step_id in ("s1", "s2", "s3"):
        version = await step_version(h, "lt-1", step_id)
        await h.door.begin_step("lt-1", attempt, step_id, version)
        evidence = [NewEvidence("log", f"run://{step_id}", "done")]
        await h.door.complete_step("lt-1", attempt, step_id, version + 1, evidence)
    ready = await h.door.ready_for_verification("lt-1", attempt)
    assert ready.task.state is T.VERIFYING
    return ready.task.state_version


async def test_a_verification_with_every_required_criterion_proven_completes(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    await _all_done(h, attempt)
    proof = NewEvidence("check", "file://r.md", "exists, 2 KiB")
    verdict = VerdictIn("c1", Source.CHECKER, CriterionResult.PASSED, (proof,))
    done = await h.door.record_verification("lt-1", attempt, [verdict])
    assert done.task.state is T.COMPLETED and done.task.lease is None
    c1, _ = await h.sql.criteria(None, "lt-1", 1)
    assert (c1.result, c1.result_source) == (CriterionResult.PASSED, "checker")
    assert [a.outcome for a in await h.sql.attempts(None, "lt-1")] == [AttemptOutcome.VERIFIED]


async def test_a_failed_criterion_gets_its_correction_rounds_then_partial(h: Harness) -> None:
    attempt = (await running(h, new_task(max_corrections=1))).made
    assert attempt is not None
    await _all_done(h, attempt)
    failed = VerdictIn("c1", Source.CHECKER, CriterionResult.FAILED)
    corrected = await h.door.record_verification("lt-1", attempt, [failed])
    assert corrected.task.state is T.RUNNING and corrected.task.corrections_used == 1
    await h.door.ready_for_verification("lt-1", attempt)
    partial = await h.door.record_verification("lt-1", attempt, [failed])
    assert partial.task.state is T.PARTIAL and "c1" in partial.task.state_reason


async def test_unproven_criteria_ask_a_person_whose_confirmation_completes_the_task(
    h: Harness,
) -> None:
    spec = new_task(criteria=(NewCriterion("c1", "the tone is friendly"),))
    attempt = (await running(h, spec)).made
    assert attempt is not None
    await _all_done(h, attempt)
    judge = VerdictIn("c1", Source.JUDGE, CriterionResult.PASSED, (NewEvidence("j", "j://", ""),))
    asked = await h.door.record_verification("lt-1", attempt, [judge])
    assert asked.task.state is T.WAITING_FOR_USER  # all subjective: never auto-completed
    assert asked.decision is not None and asked.decision.kind is DecisionKind.VERIFICATION
    confirmed = await h.door.answer(
        "lt-1", asked.decision.id, asked.task.state_version, ANA, "confirm"
    )
    assert confirmed.task.state is T.QUEUED
    [c1] = await h.sql.criteria(None, "lt-1", 1)
    assert (c1.result, c1.result_source) == (CriterionResult.PASSED, "user")
    second = await h.door.start_attempt("lt-1", SCHEDULER, confirmed.task.state_version)
    assert second.made is not None
    await h.door.ready_for_verification("lt-1", second.made)
    done = await h.door.record_verification("lt-1", second.made, [])
    assert done.task.state is T.COMPLETED


async def test_renew_lease_moves_only_the_expiry(h: Harness) -> None:
    started = await running(h)
    assert started.made is not None and started.task.lease is not None
    h.clock.now += 60_000
    expires = await h.door.renew_lease("lt-1", started.made)
    task = await h.sql.get_task("lt-1")
    assert task is not None and task.lease is not None
    assert task.lease.expires_at_ms == expires > started.task.lease.expires_at_ms
    assert task.state_version == started.task.state_version
    with pytest.raises(LongTaskLeaseNotHeld):
        await h.door.renew_lease("lt-1", "someone-else")


async def test_an_attempt_budget_used_up_ends_the_task_partial_with_its_reason(
    h: Harness,
) -> None:
    """Partial: a step completed with its evidence (a useful result, boundary.py)."""
    started = await running(h, new_task(max_attempts=1))
    assert started.made is not None
    await h.door.begin_step("lt-1", started.made, "s1", 1)
    await h.door.complete_step("lt-1", started.made, "s1", 2, [NewEvidence("f", "a://1", "x")])
    ended = await h.door.attempt_ended("lt-1", started.made, "run lost")
    assert ended.task.state is T.QUEUED
    stopped = await h.door.start_attempt("lt-1", SCHEDULER, ended.task.state_version)
    assert stopped.task.state is T.PARTIAL and stopped.run_id is None
    assert "budget of 1 attempts" in stopped.task.state_reason
    assert "steps done: 1 of 3" in stopped.task.state_reason
