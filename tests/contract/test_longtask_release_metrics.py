"""The long tasks' release metrics (docs/operations.md "Metrics"), counted by the door's
listener after real door calls on SQLite and PostgreSQL: terminal outcomes, how recovery
went on after an attempt ended, decisions a person answered, repeated approval requests,
the queue wait, false completions and duplicate side effects. A refused command counts
nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from kernel.errors import LongTaskVersionConflict
from longtasks.domain.completion import Source
from longtasks.domain.model import StepDraft
from longtasks.domain.states import CriterionResult, SideEffect, TaskState
from longtasks.service.inputs import Intent, NewCriterion, NewEvidence, ReceiptIn, VerdictIn
from services.bootstrap import open_store
from services.metrics import Metrics
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


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


@pytest.fixture
def metrics(h: Harness) -> Metrics:
    counted = Metrics(CollectorRegistry())
    h.door.listen(counted.long_task_committed)
    return counted


def value(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


async def test_queue_wait_is_observed_when_the_attempt_starts(h: Harness, metrics: Metrics) -> None:
    created = await h.door.create(new_task(), ANA)
    queued = await h.door.enqueue("lt-1", created.task.state_version, ANA)
    h.clock.now += 90_000
    await h.door.start_attempt("lt-1", SCHEDULER, queued.task.state_version)
    assert value(metrics, "truerun_long_task_queue_wait_seconds_count") == 1
    assert value(metrics, "truerun_long_task_queue_wait_seconds_sum") == 90.0
    assert value(metrics, "truerun_long_task_queue_wait_seconds_bucket", le="60.0") == 0
    assert value(metrics, "truerun_long_task_queue_wait_seconds_bucket", le="300.0") == 1


async def test_queue_wait_counts_from_entering_the_queue_not_from_a_revision_while_queued(
    h: Harness, metrics: Metrics
) -> None:
    created = await h.door.create(new_task(), ANA)
    queued = await h.door.enqueue("lt-1", created.task.state_version, ANA)
    h.clock.now += 600_000
    revised = await h.door.revise_plan("lt-1", queued.task.state_version, ANA, "one more note")
    assert revised.task.state.value == "queued"
    h.clock.now += 60_000
    await h.door.start_attempt("lt-1", SCHEDULER, revised.task.state_version)
    assert value(metrics, "truerun_long_task_queue_wait_seconds_sum") == 660.0


async def test_recovery_outcomes_and_the_answers_of_people(h: Harness, metrics: Metrics) -> None:
    first = (await running(h)).made
    assert first is not None
    resumed = await h.door.attempt_ended("lt-1", first, "run lost")  # nothing uncertain
    assert resumed.task.state.value == "queued"
    assert value(metrics, "truerun_long_task_recovery_total", outcome="resumed") == 1

    second = (await h.door.start_attempt("lt-1", SCHEDULER)).made
    assert second is not None
    await h.door.begin_step("lt-1", second, "s1", 1)
    await h.door.complete_step("lt-1", second, "s1", 2, [NewEvidence("f", "a://1", "x")])
    await h.door.begin_step("lt-1", second, "s2", 1)
    await h.door.record_intent("lt-1", second, "s2", 2, Intent("mail:team", "the report"))
    asked = await h.door.attempt_ended("lt-1", second, "run lost")  # the email may be sent
    assert asked.task.state.value == "waiting_for_user" and asked.decision is not None
    assert value(metrics, "truerun_long_task_recovery_total", outcome="asked_person") == 1
    assert value(metrics, "truerun_long_task_human_intervention_total", kind="effect") == 0

    await h.door.answer("lt-1", asked.decision.id, asked.task.state_version, ANA, "done")
    assert value(metrics, "truerun_long_task_human_intervention_total", kind="effect") == 1
    assert value(metrics, "truerun_long_task_recovery_total", outcome="recovery_required") == 0


async def test_a_repeated_approval_is_counted_and_the_grant_is_an_intervention(
    h: Harness, metrics: Metrics
) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    asked = await h.door.request_approval("lt-1", attempt, "send:team", "May I send it?")
    assert asked.decision is not None
    assert value(metrics, "truerun_long_task_approval_repeat_total") == 0
    granted = await h.door.answer("lt-1", asked.decision.id, asked.task.state_version, ANA, "grant")
    assert value(metrics, "truerun_long_task_human_intervention_total", kind="approval") == 1
    again = await h.door.request_approval("lt-1", attempt, "send:team", "May I send it again?")
    assert again.decision is not None and again.decision.repeat_count == 2
    assert granted.task.state.value == "running"
    assert value(metrics, "truerun_long_task_approval_repeat_total") == 1
    await h.door.answer("lt-1", again.decision.id, again.task.state_version, ANA, "deny")
    assert value(metrics, "truerun_long_task_human_intervention_total", kind="approval") == 2
    await h.door.request_approval("lt-1", attempt, "delete:old", "May I delete the old one?")
    assert (
        value(metrics, "truerun_long_task_approval_repeat_total") == 1
    )  # another action: no repeat


async def test_terminal_outcomes_are_counted_once_and_a_refusal_counts_nothing(
    h: Harness, metrics: Metrics
) -> None:
    attempt = (await running(h, new_task(max_tokens=100))).made
    assert attempt is not None
    await h.door.report_usage("lt-1", attempt, "u-1", 150)  # nothing done: failed
    assert value(metrics, "truerun_long_task_outcome_total", state="failed") == 1
    await h.door.attempt_ended("lt-1", attempt, "run cancelled")  # still failed: not again
    assert value(metrics, "truerun_long_task_outcome_total", state="failed") == 1

    other = await h.door.create(new_task("lt-2"), ANA)
    with pytest.raises(LongTaskVersionConflict):
        await h.door.cancel("lt-2", other.task.state_version + 5, ANA)
    assert value(metrics, "truerun_long_task_outcome_total", state="cancelled") == 0
    await h.door.cancel("lt-2", other.task.state_version, ANA, "not needed")
    assert value(metrics, "truerun_long_task_outcome_total", state="cancelled") == 1

    scraped = metrics.exposition()
    assert 'truerun_long_task_outcome_total{state="failed"} 1.0' in scraped
    assert 'truerun_long_task_outcome_total{state="cancelled"} 1.0' in scraped
    for name in (
        "truerun_long_task_recovery_total",
        "truerun_long_task_human_intervention_total",
        "truerun_long_task_approval_repeat_total",
        "truerun_long_task_queue_wait_seconds",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in scraped


async def test_a_failing_listener_never_undoes_a_committed_change(
    h: Harness, metrics: Metrics
) -> None:
    def broken(_: object) -> None:
        raise RuntimeError("a listener bug")

    h.door.listen(broken)
    created = await h.door.create(new_task(), ANA)
    cancelled = await h.door.cancel("lt-1", created.task.state_version, ANA, "not needed")
    assert cancelled.task.state.value == "cancelled"
    stored = await h.sql.get_task("lt-1")
    assert stored is not None and stored.state.value == "cancelled"
    assert value(metrics, "truerun_long_task_outcome_total", state="cancelled") == 1


PASSED = VerdictIn("c1", Source.CHECKER, CriterionResult.PASSED, (NewEvidence("f", "r.md", ""),))
FAILED = VerdictIn("c1", Source.CHECKER, CriterionResult.FAILED)


async def _steps_done(h: Harness, attempt: str, task_id: str = "lt-1") -> None:
    for step_id in ("s1", "s2", "s3"):
        version = await step_version(h, task_id, step_id)
        await h.door.begin_step(task_id, attempt, step_id, version)
        evidence = [NewEvidence("log", f"run://{step_id}", "done")]
        await h.door.complete_step(task_id, attempt, step_id, version + 1, evidence)
    await h.door.ready_for_verification(task_id, attempt)


async def test_a_completion_found_false_by_a_person_and_then_by_the_verifier(
    h: Harness, metrics: Metrics
) -> None:
    first = (await running(h)).made
    assert first is not None
    await _steps_done(h, first)
    done = await h.door.record_verification("lt-1", first, [PASSED])
    assert done.task.state is TaskState.COMPLETED
    assert value(metrics, "truerun_long_task_false_completion_total", found_by="person") == 0
    reopened = await h.door.continue_task("lt-1", done.task.state_version, ANA, "not sent")
    assert value(metrics, "truerun_long_task_false_completion_total", found_by="person") == 1

    second = (await h.door.start_attempt("lt-1", SCHEDULER, reopened.task.state_version)).made
    assert second is not None
    await h.door.ready_for_verification("lt-1", second)  # the steps were carried over done
    assert value(metrics, "truerun_long_task_false_completion_total", found_by="verifier") == 0
    await h.door.record_verification("lt-1", second, [FAILED])
    assert value(metrics, "truerun_long_task_false_completion_total", found_by="verifier") == 1
    [disputed] = [e for e in await h.sql.events("lt-1") if e.type == "completion_disputed"]
    assert "plan version 1 completed" in disputed.message
    await h.door.ready_for_verification("lt-1", second)
    await h.door.record_verification("lt-1", second, [FAILED])  # failed again: no new finding
    assert value(metrics, "truerun_long_task_false_completion_total", found_by="verifier") == 1
    assert value(metrics, "truerun_long_task_false_completion_total", found_by="person") == 1


async def test_a_pass_reversed_before_any_completion_is_no_false_completion(
    h: Harness, metrics: Metrics
) -> None:
    spec = new_task(
        criteria=(
            NewCriterion("c1", "the report file exists", "file_exists", '{"path": "r.md"}'),
            NewCriterion("c3", "the archive exists", "file_exists", '{"path": "a.zip"}'),
        )
    )
    attempt = (await running(h, spec)).made
    assert attempt is not None
    await _steps_done(h, attempt)
    c3 = VerdictIn("c3", Source.CHECKER, CriterionResult.FAILED)
    corrected = await h.door.record_verification("lt-1", attempt, [PASSED, c3])
    assert corrected.task.state is TaskState.RUNNING  # a correction round
    await h.door.ready_for_verification("lt-1", attempt)
    await h.door.record_verification("lt-1", attempt, [FAILED, c3])  # c1 passed, now failed
    assert value(metrics, "truerun_long_task_false_completion_total", found_by="verifier") == 0
    assert value(metrics, "truerun_long_task_false_completion_total", found_by="person") == 0


async def _effect(
    h: Harness, attempt: str, step_id: str, external_id: str, stale: bool = False
) -> None:
    version = await step_version(h, "lt-1", step_id)
    await h.door.begin_step("lt-1", attempt, step_id, version)
    await h.door.record_intent("lt-1", attempt, step_id, version + 1, Intent("arch:1", "zip"))
    receipt = ReceiptIn("arch:1", h.clock.now, "archived", external_id)
    await h.door.record_receipt("lt-1", attempt, step_id, version + (1 if stale else 2), receipt)


async def test_a_second_receipt_for_one_intent_key_is_a_duplicate_effect(
    h: Harness, metrics: Metrics
) -> None:
    archive = [
        StepDraft(f"a{i}", "archive it", SideEffect.IDEMPOTENT, idempotency_key="archive-1")
        for i in (1, 2, 3, 4)
    ]
    attempt = (await running(h, new_task(steps=tuple(archive)))).made
    assert attempt is not None
    await _effect(h, attempt, "a1", "zip-1")
    await _effect(h, attempt, "a2", "zip-1")  # the service answered with the first effect
    assert value(metrics, "truerun_long_task_duplicate_effect_total") == 0
    with pytest.raises(LongTaskVersionConflict):  # a refused receipt counts nothing
        await _effect(h, attempt, "a3", "zip-2", stale=True)
    assert value(metrics, "truerun_long_task_duplicate_effect_total") == 0
    await _effect(h, attempt, "a4", "zip-2")  # another effect under the same key
    assert value(metrics, "truerun_long_task_duplicate_effect_total") == 1
    [found] = [e for e in await h.sql.events("lt-1") if e.type == "duplicate_effect"]
    assert found.step_id == "a4" and "try 1" in found.message
    assert "truerun_long_task_duplicate_effect_total 1.0" in metrics.exposition()
