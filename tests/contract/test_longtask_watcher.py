"""The long-task watcher and scheduler on SQLite and real PostgreSQL (docs/long-tasks.md "The
watcher"): the real round (``run_once``) starts queued tasks under the owner's cap, in
creation order, ends the attempts whose run the coordinator ended (never an ``unknown``
one), settles what died while no watcher ran, and two watchers racing on one database start
and end every attempt exactly once."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from coordinator.domain import commands as c
from coordinator.domain.display import display_state
from coordinator.domain.states import DisplayState, RunStatus
from longtasks.domain.queue import queue_positions
from longtasks.domain.states import AttemptOutcome, Basis, DecisionKind, StepState, TaskState
from longtasks.service.inputs import Intent
from longtasks.service.watcher import LongTaskWatcher, OwnerAtCapacity
from services.bootstrap import longtask_watcher_sql, open_store
from services.metrics import Metrics
from tests.support.clock import Clock
from tests.support.factories import SCHEDULER as CAPACITY
from tests.support.factories import evidence
from tests.support.longtask_watch import (
    attempts_of,
    cancel_run,
    events,
    fail_through_the_runtime,
    fence,
    lease,
    queued,
    run_status,
    state,
    step,
    until,
    watcher,
)
from tests.support.longtasks import ANA, SCHEDULER, Harness, harness, read, snapshot

T, S = TaskState, StepState


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


async def test_a_queued_task_is_started_with_its_run_and_counted(h: Harness) -> None:
    await queued(h)
    metrics = Metrics()
    done = await watcher(h, metrics=metrics).run_once()
    assert done.started == ["lt-1"] and done.ended == {}
    assert await state(h) is T.RUNNING
    attempt_id, run_id = await lease(h)
    loaded = await h.store.load(run_id)
    assert loaded is not None
    assert loaded.run.idempotency_key == "long_task:lt-1:attempt:1"
    assert (loaded.run.status, loaded.run.created_by) == (
        RunStatus.QUEUED,
        "long-task-scheduler:w1",
    )
    [attempt] = await h.sql.attempts(None, "lt-1")
    assert (attempt.id, attempt.attempt_no, attempt.ended_at_ms) == (attempt_id, 1, None)
    again = await watcher(h, name="w2").run_once()  # nothing queued, nothing ended
    assert (again.started, again.ended) == ([], {})
    text = metrics.exposition()
    assert 'truerun_long_task_watcher_action_total{action="started",label=""} 1.0' in text


async def test_a_failed_run_ends_the_attempt_and_a_pure_step_runs_again_in_attempt_2(
    h: Harness,
) -> None:
    await queued(h)
    w = watcher(h)
    await w.run_once()
    first, run_id = await lease(h)
    await h.door.begin_step("lt-1", first, "s1", 1)
    await fail_through_the_runtime(h, run_id)
    done = await w.run_once()
    assert done.ended == {"failed": 1} and done.started == ["lt-1"]  # ended, then attempt 2
    ended, second = await h.sql.attempts(None, "lt-1")
    assert (ended.outcome, ended.ended_at_ms) == (AttemptOutcome.RUN_ENDED, h.clock.now)
    assert ended.reason == "its run ended failed: exit_1; the agent crashed"
    assert second.attempt_no == 2 and second.ended_at_ms is None
    s1 = await step(h, "s1")
    assert (s1.state, s1.basis) == (S.UNCERTAIN, Basis.HOLDER_GONE)
    loaded = await h.store.load(second.run_id)
    assert loaded is not None and loaded.run.idempotency_key == "long_task:lt-1:attempt:2"
    r = await h.door.begin_step("lt-1", second.id, "s1", s1.version)
    assert r.step is not None and (r.step.state, r.step.basis) == (S.RUNNING, Basis.CLASS_SAFE)
    assert [t for t, _ in await events(h, "lt-1")].count("attempt_ended") == 1


async def test_an_open_non_idempotent_intent_whose_run_was_cancelled_goes_to_a_person(
    h: Harness,
) -> None:
    await queued(h)
    w = watcher(h)
    await w.run_once()
    attempt, run_id = await lease(h)
    d = h.door
    await d.skip_step("lt-1", attempt, "s1", 1)
    await d.begin_step("lt-1", attempt, "s2", 1)
    await d.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "the weekly report"))
    await cancel_run(h, run_id)
    done = await w.run_once()
    assert done.ended == {"cancelled": 1} and done.started == []
    assert await state(h) is T.WAITING_FOR_USER
    [decision] = await h.sql.decisions(None, "lt-1")
    assert (decision.kind, decision.step_id) == (DecisionKind.EFFECT, "s2")
    assert json.loads(decision.material)["target"] == "mail:boss"
    [a] = await h.sql.attempts(None, "lt-1")
    assert a.reason.startswith("its run ended cancelled") and "not needed" in a.reason


async def test_an_unknown_run_keeps_its_attempt_open_until_it_is_known_lost(h: Harness) -> None:
    await queued(h)
    w = watcher(h)
    await w.run_once()
    attempt, run_id = await lease(h)
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    t = h.app.transitions
    await fence(h, run_id)
    await t.execute(c.DispatchUnknown(run_id, CAPACITY, reason="start_timeout"))
    loaded = await h.store.load(run_id)
    assert loaded is not None
    assert display_state(loaded.run, loaded.attempt) is DisplayState.UNKNOWN
    for _ in range(2):
        done = await w.run_once()
        assert (done.ended, done.started) == ({}, [])
    assert await state(h) is T.RUNNING and (await lease(h))[0] == attempt
    [a] = await h.sql.attempts(None, "lt-1")
    assert a.ended_at_ms is None
    assert (await step(h, "s1")).state is S.RUNNING  # never guessed dead
    await t.execute(c.MarkLost(run_id, CAPACITY, reason="worker_lost"))
    done = await w.run_once()
    assert done.ended == {"lost": 1}
    [ended, _] = await h.sql.attempts(None, "lt-1")
    assert ended.reason.startswith("its run ended lost: worker_lost")
    assert (await step(h, "s1")).state is S.UNCERTAIN


async def test_the_owner_cap_starts_tasks_in_creation_order_as_slots_free(h: Harness) -> None:
    for n in range(1, 7):
        await queued(h, f"lt-{n}")
    await queued(h, "other-1", owner_id="bo")  # another owner's queue is its own
    w = watcher(h, cap=2)
    done = await w.run_once()
    assert done.started == ["lt-1", "lt-2", "other-1"]
    tasks = [t for t in [await h.sql.get_task(f"lt-{n}") for n in range(1, 7)] if t]
    assert queue_positions(tasks) == {"lt-3": 0, "lt-4": 1, "lt-5": 2, "lt-6": 3}
    assert (await w.run_once()).started == []  # full: nothing more
    order = []
    for n in range(1, 5):  # a person cancels the oldest running one; its run is cancelled
        task = await h.sql.get_task(f"lt-{n}")
        assert task is not None and task.state is T.RUNNING
        await h.door.cancel(task.id, task.state_version, ANA)
        done = await w.run_once()
        assert done.ended == {"cancelled": 1}
        order += done.started
    assert order == ["lt-3", "lt-4", "lt-5", "lt-6"]
    states = [await state(h, f"lt-{n}") for n in range(1, 7)]
    assert states == [T.CANCELLED] * 4 + [T.RUNNING] * 2


async def test_a_task_whose_last_attempt_is_open_gives_its_turn_to_the_next(h: Harness) -> None:
    await queued(h, "lt-1")
    await queued(h, "lt-2")
    w = watcher(h, cap=1)
    assert (await w.run_once()).started == ["lt-1"]
    _, run_id = await lease(h)
    fenced = await fence(h, run_id)
    task = await h.sql.get_task("lt-1")
    assert task is not None
    paused = await h.door.pause("lt-1", task.state_version, ANA)  # asks the run's cancel
    await h.door.resume("lt-1", paused.task.state_version, ANA)  # queued, attempt 1 open
    assert await run_status(h, run_id) is RunStatus.DISPATCHING  # no runtime confirmation yet
    done = await w.run_once()
    assert (done.ended, done.started) == ({}, ["lt-2"])  # lt-1: ATTEMPT_OPEN, its turn passes
    await h.app.transitions.execute(
        evidence(c.RuntimeResult, fenced, 1, outcome=c.RuntimeOutcome.CANCELLED)
    )
    done = await w.run_once()
    assert (done.ended, done.started) == ({"cancelled": 1}, [])  # ended; the owner is full
    tasks = [t for t in [await h.sql.get_task(i) for i in ("lt-1", "lt-2")] if t]
    assert queue_positions(tasks) == {"lt-1": 0}


async def test_two_watchers_racing_start_and_end_each_attempt_once(
    h: Harness, migrated_database_url: str
) -> None:
    other_store = await open_store(migrated_database_url)  # a second replica
    try:
        other = harness(other_store, h.clock)
        for n in range(1, 5):
            await queued(h, f"lt-{n}", max_attempts=2)
        await queued(h, "other-1", owner_id="bo", max_attempts=2)
        one, two = watcher(h, cap=2, name="w1"), watcher(other, cap=2, name="w2")
        for _ in range(40):
            await asyncio.gather(one.run_once(), two.run_once())
            rows = await read(h.store, "SELECT owner_id, state FROM long_tasks")
            active = Counter(row["owner_id"] for row in rows if T(row["state"]).leased)
            assert max(active.values(), default=0) <= 2
            for row in await read(h.store, "SELECT run_id FROM long_task_attempts"):
                if await run_status(h, row["run_id"]) is RunStatus.QUEUED:
                    await cancel_run(h, row["run_id"])
            rows = await read(h.store, "SELECT state FROM long_tasks")
            if all(T(row["state"]).terminal for row in rows):
                break
        rows = await read(h.store, "SELECT id, state FROM long_tasks")
        # 2 attempts, both ended, no step done: failed (no useful result, boundary.py)
        assert {row["state"] for row in rows} == {T.FAILED.value}
        for task_id in [row["id"] for row in rows]:
            attempts = await h.sql.attempts(None, task_id)
            assert [a.attempt_no for a in attempts] == [1, 2]
            assert all(a.ended_at_ms is not None for a in attempts)
            noted = Counter(await events(h, task_id))
            for a in attempts:
                assert noted[("attempt_started", a.id)] == 1
                assert noted[("attempt_ended", a.id)] == 1
    finally:
        await other_store.close()


async def test_a_fresh_watcher_settles_the_dead_and_leaves_the_live_alone(h: Harness) -> None:
    await queued(h, "lt-1")
    await queued(h, "lt-2")
    before = watcher(h, name="before-restart")
    assert (await before.run_once()).started == ["lt-1", "lt-2"]
    dead, dead_run = await lease(h, "lt-1")
    live, _ = await lease(h, "lt-2")
    await h.door.begin_step("lt-1", dead, "s1", 1)
    await h.door.begin_step("lt-2", live, "s1", 1)
    await cancel_run(h, dead_run)  # ended while no watcher ran
    done = await watcher(h, name="after-restart").run_once()
    assert done.ended == {"cancelled": 1}
    s1 = await step(h, "s1", "lt-1")
    assert (s1.state, s1.basis) == (S.UNCERTAIN, Basis.HOLDER_GONE)  # never pending
    alive = await step(h, "s1", "lt-2")
    assert (alive.state, alive.holder) == (S.RUNNING, live)
    assert (await lease(h, "lt-2"))[0] == live and await state(h, "lt-2") is T.RUNNING


async def test_process_start_buries_only_the_attempts_it_saw(h: Harness) -> None:
    """A replica names the live attempts from a snapshot; an attempt another replica
    starts after that snapshot is not in it and must stay alive."""
    await queued(h, "lt-1")
    w = watcher(h)
    snapshot = await longtask_watcher_sql(h.store).open_attempt_runs()
    assert snapshot == []
    await w.run_once()  # another replica starts lt-1 after the snapshot
    attempt, _ = await lease(h)
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    live = {a.attempt_id for a in snapshot if not a.run_ended}
    seen = {a.attempt_id for a in snapshot}
    assert await h.door.held_by_the_dead(live, seen=seen) == []
    assert (await step(h, "s1")).state is S.RUNNING
    [a] = await h.sql.attempts(None, "lt-1")
    assert a.ended_at_ms is None


async def test_the_cap_is_checked_in_the_start_transaction_and_a_full_owner_changes_nothing(
    h: Harness,
) -> None:
    """A replica that read the queue before another filled the owner's slots still cannot
    start past the cap: its start is refused inside the transaction, nothing written."""
    for n in range(1, 4):
        await queued(h, f"lt-{n}")
    w = watcher(h, cap=2)
    assert (await w.run_once()).started == ["lt-1", "lt-2"]
    task = await h.sql.get_task("lt-3")
    assert task is not None and task.state is T.QUEUED
    before = await snapshot(h.store)
    with pytest.raises(OwnerAtCapacity):
        await h.door.start_attempt("lt-3", SCHEDULER, task.state_version, admit=w.admit)
    assert await snapshot(h.store) == before
    bigger = watcher(h, cap=3)  # the cap raised: the same start goes through
    started = await h.door.start_attempt("lt-3", SCHEDULER, task.state_version, admit=bigger.admit)
    assert started.task.state is T.RUNNING and started.made is not None


async def test_a_full_owners_long_queue_never_hides_another_owners_task(h: Harness) -> None:
    for n in range(1, 5):
        await queued(h, f"lt-{n}")
    await queued(h, "bo-1", owner_id="bo")  # the newest of all
    w = LongTaskWatcher(
        h.door, longtask_watcher_sql(h.store), owner_concurrency=1, queued_per_round=2
    )
    assert (await w.run_once()).started == ["lt-1"]  # the two oldest read: both ana's
    assert (await w.run_once()).started == ["bo-1"]  # ana is full: her queue is not read
    assert (await w.run_once()).started == []


async def test_the_served_loop_starts_and_after_a_runs_end_starts_again(h: Harness) -> None:
    """The loop as the reconciler runs it, woken by this process's commits."""
    await queued(h, "lt-1")
    w = watcher(h)
    h.app.hub.listen(w.wake)
    serving = asyncio.create_task(w.serve())
    try:
        await until(lambda: attempts_of(h, "lt-1", 1))
        _, run_id = await lease(h)
        await cancel_run(h, run_id)
        await until(lambda: attempts_of(h, "lt-1", 2))
        first, second = await h.sql.attempts(None, "lt-1")
        assert first.ended_at_ms is not None and second.ended_at_ms is None
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
