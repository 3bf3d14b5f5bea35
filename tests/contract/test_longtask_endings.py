"""The end of an attempt through the door on SQLite and real PostgreSQL (seed C "安全恢复"):
a dead holder's running step becomes uncertain, never pending; a proven effect is completed,
a safe step retried, a queryable one probed first, a non-idempotent one with an intent put to
a person with its intent record; an interrupted verification runs again until the limit; at
process start only the dead holders are settled."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from kernel.errors import InvalidLongTaskTransition, InvalidStepTransition
from longtasks.domain.model import PlanStep, StepDraft
from longtasks.domain.states import (
    AttemptOutcome,
    Basis,
    DecisionKind,
    ProbeResult,
    SideEffect,
    StepState,
    TaskState,
)
from longtasks.service.inputs import Intent, ReceiptIn
from services.bootstrap import open_store
from tests.support.clock import Clock
from tests.support.longtasks import ANA, SCHEDULER, Harness, harness, new_task, running

T, S = TaskState, StepState


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


async def step(h: Harness, step_id: str, task_id: str = "lt-1") -> PlanStep:
    task = await h.sql.get_task(task_id)
    assert task is not None
    steps = await h.sql.steps(None, task_id, task.plan_version)
    return next(s for s in steps if s.step_id == step_id)


async def test_a_pure_step_whose_holder_died_is_uncertain_then_retried(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    ended = await h.door.attempt_ended("lt-1", attempt, "run lost")
    assert ended.task.state is T.QUEUED and ended.task.lease is None
    s1 = await step(h, "s1")
    assert (s1.state, s1.basis, s1.holder) == (S.UNCERTAIN, Basis.HOLDER_GONE, None)
    again = await h.door.attempt_ended("lt-1", attempt, "run lost")  # a repeat: nothing
    assert again.task.state_version == ended.task.state_version
    second = await h.door.start_attempt("lt-1", SCHEDULER, ended.task.state_version)
    assert second.made is not None
    r = await h.door.begin_step("lt-1", second.made, "s1", 3)
    assert r.step is not None and (r.step.state, r.step.basis) == (S.RUNNING, Basis.CLASS_SAFE)


async def test_a_non_idempotent_effect_that_may_have_happened_goes_to_a_person(
    h: Harness,
) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    d = h.door
    await d.skip_step("lt-1", attempt, "s1", 1)
    await d.begin_step("lt-1", attempt, "s2", 1)
    await d.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "the weekly report"))
    ended = await d.attempt_ended("lt-1", attempt, "runtime killed")
    assert ended.task.state is T.WAITING_FOR_USER
    assert ended.decision is not None and ended.decision.kind is DecisionKind.EFFECT
    assert ended.decision.step_id == "s2"
    material = json.loads(ended.decision.material)
    assert (material["target"], material["summary"]) == ("mail:boss", "the weekly report")
    with pytest.raises(InvalidLongTaskTransition):  # nothing runs until a person answers
        await d.start_attempt("lt-1", SCHEDULER)
    answered = await d.answer("lt-1", ended.decision.id, ended.task.state_version, ANA, "done")
    assert answered.task.state is T.QUEUED
    s2 = await step(h, "s2")
    assert (s2.state, s2.basis) == (S.COMPLETED, Basis.USER)
    [evidence] = await h.sql.evidence(None, "lt-1")
    assert (evidence.step_id, evidence.kind) == ("s2", "answer")


async def test_retry_of_an_uncertain_non_idempotent_step_needs_a_persons_answer(
    h: Harness,
) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    d = h.door
    await d.skip_step("lt-1", attempt, "s1", 1)
    await d.begin_step("lt-1", attempt, "s2", 1)
    await d.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "report"))
    ended = await d.attempt_ended("lt-1", attempt, "runtime killed")
    assert ended.decision is not None
    answered = await d.answer("lt-1", ended.decision.id, ended.task.state_version, ANA, "retry")
    second = await d.start_attempt("lt-1", SCHEDULER, answered.task.state_version)
    assert second.made is not None
    s2 = await step(h, "s2")
    r = await d.begin_step("lt-1", second.made, "s2", s2.version)
    assert r.step is not None and (r.step.basis, r.step.granted_by) == (Basis.USER, None)
    assert (r.step.intent_id, r.step.attempt_count) == (None, 2)


async def test_a_step_with_its_receipt_is_completed_and_the_task_goes_on(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    d = h.door
    await d.skip_step("lt-1", attempt, "s1", 1)
    await d.begin_step("lt-1", attempt, "s2", 1)
    await d.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "report"))
    await d.record_receipt("lt-1", attempt, "s2", 3, ReceiptIn("mail:boss", 1, "250 OK", "m-1"))
    ended = await d.attempt_ended("lt-1", attempt, "runtime killed after the receipt")
    assert ended.task.state is T.QUEUED
    s2 = await step(h, "s2")
    assert (s2.state, s2.basis) == (S.COMPLETED, Basis.RECEIPT)


async def test_a_queryable_step_is_probed_before_any_retry(h: Harness) -> None:
    spec = new_task(steps=(StepDraft("q1", "post the note", SideEffect.QUERYABLE),))
    attempt = (await running(h, spec)).made
    assert attempt is not None
    d = h.door
    await d.begin_step("lt-1", attempt, "q1", 1)
    await d.record_intent("lt-1", attempt, "q1", 2, Intent("wiki:page", "the note"))
    ended = await d.attempt_ended("lt-1", attempt, "runtime killed")
    assert ended.task.state is T.QUEUED  # probe first: no question yet
    second = await d.start_attempt("lt-1", SCHEDULER, ended.task.state_version)
    assert second.made is not None
    q1 = await step(h, "q1")
    with pytest.raises(InvalidStepTransition) as refused:
        await d.begin_step("lt-1", second.made, "q1", q1.version)
    assert refused.value.metadata["refusal"] == "BASIS_REQUIRED"
    probed = await d.record_probe("lt-1", second.made, "q1", q1.version, ProbeResult.NOT_DONE)
    assert probed.step is not None
    r = await d.begin_step("lt-1", second.made, "q1", probed.step.version)
    assert r.step is not None and r.step.basis is Basis.PROBE_NOT_DONE


async def test_a_failed_step_needs_review_and_a_check_sends_it_on(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    await h.door.fail_step("lt-1", attempt, "s1", 2, "no data")
    ended = await h.door.attempt_ended("lt-1", attempt, "run failed")
    assert ended.task.state is T.RECOVERY_REQUIRED
    cleared = await h.door.clear_recovery("lt-1", ended.task.state_version, ANA, "data is back")
    assert cleared.task.state is T.QUEUED


async def test_an_interrupted_verification_runs_again_until_the_limit(h: Harness) -> None:
    spec = new_task(steps=(StepDraft("s1", "write", SideEffect.PURE),), max_verify_interruptions=2)
    started = await running(h, spec)
    attempt = started.made
    assert attempt is not None
    await h.door.skip_step("lt-1", attempt, "s1", 1)
    await h.door.ready_for_verification("lt-1", attempt)
    first = await h.door.attempt_ended("lt-1", attempt, "killed while verifying")
    assert (first.task.state, first.task.verify_interruptions) == (T.QUEUED, 1)
    second = await h.door.start_attempt("lt-1", SCHEDULER, first.task.state_version)
    assert second.made is not None
    await h.door.ready_for_verification("lt-1", second.made)
    twice = await h.door.attempt_ended("lt-1", second.made, "killed while verifying")
    assert (twice.task.state, twice.task.verify_interruptions) == (T.RECOVERY_REQUIRED, 2)


async def test_at_process_start_only_the_dead_holders_steps_become_uncertain(
    h: Harness,
) -> None:
    alive = await running(h, new_task("lt-a"))
    dead = await running(h, new_task("lt-b"))
    assert alive.made is not None and dead.made is not None
    await h.door.begin_step("lt-a", alive.made, "s1", 1)
    await h.door.begin_step("lt-b", dead.made, "s1", 1)
    changed = await h.door.held_by_the_dead({alive.made})
    assert [c.task.id for c in changed] == ["lt-b"]
    assert (await step(h, "s1", "lt-a")).state is S.RUNNING
    assert (await step(h, "s1", "lt-b")).state is S.UNCERTAIN
    [attempt] = await h.sql.attempts(None, "lt-b")
    assert attempt.outcome is AttemptOutcome.RUN_ENDED
    b = await h.sql.get_task("lt-b")
    assert b is not None and b.state is T.QUEUED
    assert await h.door.held_by_the_dead({alive.made}) == []  # settled once
