"""Token usage and the task's budget on SQLite and real PostgreSQL (docs/long-tasks.md
"Budgets"; seed C "预算、并发与配额"): the runtime's reports accumulate without moving the
task's version, a repeated usage id counts once, an attempt without the lease is refused
with nothing written, and the budget used up moves the task to ``partial`` (``failed`` when
nothing useful was done) with the reason and the met and unmet criteria in words, cancels
the attempt's run, and no attempt follows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from coordinator.domain.states import RunStatus
from kernel.errors import InvalidArgument, InvalidLongTaskTransition, LongTaskLeaseNotHeld
from longtasks.domain.states import (
    AttemptOutcome,
    DecisionState,
    StepState,
    TaskState,
)
from longtasks.service.base import LEASE_MS
from longtasks.service.inputs import NewEvidence
from services.bootstrap import open_store
from tests.support.clock import Clock
from tests.support.longtasks import (
    ANA,
    SCHEDULER,
    Harness,
    harness,
    new_task,
    read,
    running,
    snapshot,
)

T = TaskState


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


async def usage_rows(h: Harness) -> list[tuple[str, str, int]]:
    rows = await read(
        h.store, "SELECT usage_id, attempt_id, tokens FROM long_task_usage ORDER BY usage_id"
    )
    return [(r["usage_id"], r["attempt_id"], int(r["tokens"])) for r in rows]


async def test_usage_accumulates_without_a_new_version_and_renews_the_lease(h: Harness) -> None:
    started = await running(h, new_task(max_tokens=5000))
    attempt = started.made
    assert attempt is not None
    events = len(await h.sql.events("lt-1"))
    h.clock.now += 60_000
    first = await h.door.report_usage("lt-1", attempt, "u-1", 1200)
    second = await h.door.report_usage("lt-1", attempt, "u-2", 300)
    task = await h.sql.get_task("lt-1")
    assert task is not None and task == second.task
    assert first.task.budget.tokens_used == 1200
    assert (task.budget.tokens_used, task.budget.max_tokens) == (1500, 5000)
    assert task.state is T.RUNNING and task.state_version == started.task.state_version
    assert len(await h.sql.events("lt-1")) == events  # usage is no state change
    assert task.lease is not None and task.lease.expires_at_ms == h.clock.now + LEASE_MS
    assert await usage_rows(h) == [("u-1", attempt, 1200), ("u-2", attempt, 300)]


async def test_a_repeated_usage_id_counts_once(h: Harness) -> None:
    attempt = (await running(h, new_task(max_tokens=5000))).made
    assert attempt is not None
    await h.door.report_usage("lt-1", attempt, "u-1", 1200)
    before = await snapshot(h.store)
    again = await h.door.report_usage("lt-1", attempt, "u-1", 1200)
    assert again.notes == ("usage u-1 was counted already",)
    assert again.task.budget.tokens_used == 1200
    assert await snapshot(h.store) == before
    # the same id with another amount is the same report: still counted once
    await h.door.report_usage("lt-1", attempt, "u-1", 4000)
    task = await h.sql.get_task("lt-1")
    assert task is not None and task.budget.tokens_used == 1200
    assert await usage_rows(h) == [("u-1", attempt, 1200)]


async def test_usage_without_the_lease_is_refused_and_changes_nothing(h: Harness) -> None:
    started = await running(h, new_task(max_tokens=5000))
    attempt = started.made
    assert attempt is not None
    before = await snapshot(h.store)
    with pytest.raises(LongTaskLeaseNotHeld):
        await h.door.report_usage("lt-1", "another-attempt", "u-1", 100)
    h.clock.now += LEASE_MS  # the lease expired: its holder is not trusted any more
    with pytest.raises(LongTaskLeaseNotHeld):
        await h.door.report_usage("lt-1", attempt, "u-1", 100)
    for tokens in (0, -5):
        with pytest.raises(InvalidArgument):
            await h.door.report_usage("lt-1", attempt, "u-2", tokens)
    assert await snapshot(h.store) == before


async def test_a_paused_attempt_may_not_report_usage(h: Harness) -> None:
    started = await running(h, new_task(max_tokens=5000))
    attempt = started.made
    assert attempt is not None
    await h.door.pause("lt-1", started.task.state_version, ANA, "later")
    before = await snapshot(h.store)
    with pytest.raises(LongTaskLeaseNotHeld):
        await h.door.report_usage("lt-1", attempt, "u-1", 100)
    assert await snapshot(h.store) == before


async def test_the_budget_used_up_stops_the_task_as_partial_and_cancels_its_run(
    h: Harness,
) -> None:
    started = await running(h, new_task(max_tokens=5000))
    attempt, run_id = started.made, started.run_id
    assert attempt is not None and run_id is not None
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    await h.door.complete_step("lt-1", attempt, "s1", 2, [NewEvidence("f", "a://1", "x")])
    await h.door.begin_step("lt-1", attempt, "s2", 1)  # working when the budget runs out
    await h.door.request_approval("lt-1", attempt, "send:team", "May I send it?")
    kept = await h.door.report_usage("lt-1", attempt, "u-1", 4000)
    assert kept.task.state is T.WAITING_FOR_APPROVAL

    stopped = await h.door.report_usage("lt-1", attempt, "u-2", 1500)

    task = stopped.task
    assert task.state is T.PARTIAL and task.lease is None and task.finished_at_ms == h.clock.now
    assert task.budget.tokens_used == 5500
    assert task.state_reason == (
        "stopped because the task's budget ran out: the task's budget of 5,000 tokens is "
        "used up (5,500 used); steps done: 1 of 3; criteria met: none; "
        "criteria unmet: c1 (unproven), c2 (unproven, optional)"
    )
    assert await h.sql.get_task("lt-1") == task
    event = (await h.sql.events("lt-1"))[-2]
    assert (event.type, event.from_state, event.to_state) == (
        "budget_exhausted",
        "waiting_for_approval",
        "partial",
    )
    assert event.message == task.state_reason
    [approval] = await h.sql.decisions(None, "lt-1")
    assert approval.state is DecisionState.EXPIRED  # never granted after the stop
    loaded = await h.store.load(run_id)
    assert loaded is not None and loaded.run.status is RunStatus.CANCELLED

    # nothing goes on: no further usage, no further attempt
    with pytest.raises(LongTaskLeaseNotHeld):
        await h.door.report_usage("lt-1", attempt, "u-3", 10)
    with pytest.raises(InvalidLongTaskTransition):
        await h.door.start_attempt("lt-1", SCHEDULER)
    # the watcher ends the attempt once its run has ended: the task stays partial, the
    # step it was working on becomes uncertain (it may have had its effect)
    ended = await h.door.attempt_ended("lt-1", attempt, "run cancelled")
    assert ended.task.state is T.PARTIAL
    [a] = await h.sql.attempts(None, "lt-1")
    assert a.outcome is AttemptOutcome.RUN_ENDED
    steps = {s.step_id: s for s in await h.sql.steps(None, "lt-1", 1)}
    assert steps["s2"].state is StepState.UNCERTAIN
    assert len(await h.sql.attempts(None, "lt-1")) == 1


async def test_the_budget_reached_exactly_with_nothing_done_ends_the_task_failed(
    h: Harness,
) -> None:
    """No step completed, no criterion passed: no useful result, so ``failed`` (boundary.py)
    with the same reason words ``partial`` would carry."""
    attempt = (await running(h, new_task(max_tokens=1000))).made
    assert attempt is not None
    stopped = await h.door.report_usage("lt-1", attempt, "u-1", 1000)
    assert stopped.task.state is T.FAILED and stopped.task.lease is None
    assert "1,000 tokens is used up (1,000 used)" in stopped.task.state_reason
    assert "steps done: 0 of 3; criteria met: none" in stopped.task.state_reason
    moves = [(e.type, e.to_state) for e in await h.sql.events("lt-1") if e.to_state]
    assert moves[-1] == ("fail", "failed")


async def test_without_a_token_cap_usage_only_accumulates(h: Harness) -> None:
    attempt = (await running(h)).made
    assert attempt is not None
    for n in range(3):
        changed = await h.door.report_usage("lt-1", attempt, f"u-{n}", 10_000_000)
    assert changed.task.state is T.RUNNING
    assert changed.task.budget.tokens_used == 30_000_000


async def test_a_used_up_attempt_budget_names_the_criteria_when_the_next_would_start(
    h: Harness,
) -> None:
    started = await running(h, new_task(max_attempts=1))
    attempt = started.made
    assert attempt is not None
    ended = await h.door.attempt_ended("lt-1", attempt, "run lost")
    assert ended.task.state is T.QUEUED
    stopped = await h.door.start_attempt("lt-1", SCHEDULER)
    assert stopped.made is None and stopped.task.state is T.FAILED  # nothing useful done
    assert stopped.task.state_reason == (
        "stopped because the task's budget ran out: the task's budget of 1 attempts is used "
        "up; steps done: 0 of 3; criteria met: none; "
        "criteria unmet: c1 (unproven), c2 (unproven, optional)"
    )


async def test_concurrent_reports_sum_exactly_and_duplicates_still_count_once(
    h: Harness,
) -> None:
    """Twenty reports at once, ten ids each sent twice: the task row's lock serializes them,
    so the sum is exact and every id counted once."""
    attempt = (await running(h, new_task(max_tokens=1_000_000))).made
    assert attempt is not None
    reports = [h.door.report_usage("lt-1", attempt, f"u-{n % 10}", 100 + n % 10) for n in range(20)]
    await asyncio.gather(*reports)
    task = await h.sql.get_task("lt-1")
    assert task is not None and task.budget.tokens_used == sum(100 + n for n in range(10))
    assert len(await usage_rows(h)) == 10
