"""The long tasks' release metrics (docs/operations.md "Metrics"), counted by the door's
listener after real door calls on SQLite and PostgreSQL: terminal outcomes, how recovery
went on after an attempt ended, decisions a person answered, repeated approval requests,
and the queue wait. A refused command counts nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from kernel.errors import LongTaskVersionConflict
from longtasks.service.inputs import Intent, NewEvidence
from services.bootstrap import open_store
from services.metrics import Metrics
from tests.support.clock import Clock
from tests.support.longtasks import ANA, SCHEDULER, Harness, harness, new_task, running


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
    assert value(metrics, "long_task_queue_wait_seconds_count") == 1
    assert value(metrics, "long_task_queue_wait_seconds_sum") == 90.0
    assert value(metrics, "long_task_queue_wait_seconds_bucket", le="60.0") == 0
    assert value(metrics, "long_task_queue_wait_seconds_bucket", le="300.0") == 1


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
    assert value(metrics, "long_task_queue_wait_seconds_sum") == 660.0


async def test_recovery_outcomes_and_the_answers_of_people(h: Harness, metrics: Metrics) -> None:
    first = (await running(h)).made
    assert first is not None
    resumed = await h.door.attempt_ended("lt-1", first, "run lost")  # nothing uncertain
    assert resumed.task.state.value == "queued"
    assert value(metrics, "long_task_recovery_total", outcome="resumed") == 1

    second = (await h.door.start_attempt("lt-1", SCHEDULER)).made
    assert second is not None
    await h.door.begin_step("lt-1", second, "s1", 1)
    await h.door.complete_step("lt-1", second, "s1", 2, [NewEvidence("f", "a://1", "x")])
    await h.door.begin_step("lt-1", second, "s2", 1)
    await h.door.record_intent("lt-1", second, "s2", 2, Intent("mail:team", "the report"))
    asked = await h.door.attempt_ended("lt-1", second, "run lost")  # the email may be sent
    assert asked.task.state.value == "waiting_for_user" and asked.decision is not None
    assert value(metrics, "long_task_recovery_total", outcome="asked_person") == 1
    assert value(metrics, "long_task_human_intervention_total", kind="effect") == 0

    await h.door.answer("lt-1", asked.decision.id, asked.task.state_version, ANA, "done")
    assert value(metrics, "long_task_human_intervention_total", kind="effect") == 1
    assert value(metrics, "long_task_recovery_total", outcome="recovery_required") == 0


async def test_a_repeated_approval_is_counted_and_the_grant_is_an_intervention(
    h: Harness, metrics: Metrics
) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    asked = await h.door.request_approval("lt-1", attempt, "send:team", "May I send it?")
    assert asked.decision is not None
    assert value(metrics, "long_task_approval_repeat_total") == 0
    granted = await h.door.answer("lt-1", asked.decision.id, asked.task.state_version, ANA, "grant")
    assert value(metrics, "long_task_human_intervention_total", kind="approval") == 1
    again = await h.door.request_approval("lt-1", attempt, "send:team", "May I send it again?")
    assert again.decision is not None and again.decision.repeat_count == 2
    assert granted.task.state.value == "running"
    assert value(metrics, "long_task_approval_repeat_total") == 1
    await h.door.answer("lt-1", again.decision.id, again.task.state_version, ANA, "deny")
    assert value(metrics, "long_task_human_intervention_total", kind="approval") == 2
    await h.door.request_approval("lt-1", attempt, "delete:old", "May I delete the old one?")
    assert value(metrics, "long_task_approval_repeat_total") == 1  # another action: no repeat


async def test_terminal_outcomes_are_counted_once_and_a_refusal_counts_nothing(
    h: Harness, metrics: Metrics
) -> None:
    attempt = (await running(h, new_task(max_tokens=100))).made
    assert attempt is not None
    await h.door.report_usage("lt-1", attempt, "u-1", 150)
    assert value(metrics, "long_task_outcome_total", state="partial") == 1
    await h.door.attempt_ended("lt-1", attempt, "run cancelled")  # still partial: not again
    assert value(metrics, "long_task_outcome_total", state="partial") == 1

    other = await h.door.create(new_task("lt-2"), ANA)
    with pytest.raises(LongTaskVersionConflict):
        await h.door.cancel("lt-2", other.task.state_version + 5, ANA)
    assert value(metrics, "long_task_outcome_total", state="cancelled") == 0
    await h.door.cancel("lt-2", other.task.state_version, ANA, "not needed")
    assert value(metrics, "long_task_outcome_total", state="cancelled") == 1

    scraped = metrics.exposition()
    assert 'long_task_outcome_total{state="partial"} 1.0' in scraped
    assert 'long_task_outcome_total{state="cancelled"} 1.0' in scraped
    for name in (
        "long_task_recovery_total",
        "long_task_human_intervention_total",
        "long_task_approval_repeat_total",
        "long_task_queue_wait_seconds",
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
    assert value(metrics, "long_task_outcome_total", state="cancelled") == 1
