"""Continuations through the door and the watcher's real round, on SQLite and real
PostgreSQL, the clock moved by the test (docs/long-tasks.md "Continuations and catch-up"):
an attempt continues later and its task waits queued until due; after truerun was not
running, the missed times coalesce into one attempt or are reported while the task waits
for its next window; duplicate and stale firings change nothing but what they say."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kernel.errors import InvalidLongTaskTransition
from longtasks.domain.continuations import Continuation, ContinuationKind
from longtasks.domain.states import AttemptOutcome, TaskState
from longtasks.service.reads import TaskReads
from services.bootstrap import longtask_watcher_sql, open_store
from tests.support.clock import START, Clock
from tests.support.longtask_watch import events, lease, queued, state, watcher
from tests.support.longtasks import ANA, Harness, harness, new_task, snapshot

T = TaskState
H, M = 3_600_000, 60_000


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


def hourly(catchup: int = 15 * M) -> Continuation:
    return Continuation(
        "lt-1", ContinuationKind.WINDOW, 0, None, every_ms=H, catchup_window_ms=catchup
    )


def at(due: int) -> Continuation:
    return Continuation("lt-1", ContinuationKind.AT, 0, due, reason="continue tomorrow 09:00")


async def view_of(h: Harness, task_id: str = "lt-1") -> tuple[str, str, int | None]:
    view = await TaskReads(longtask_watcher_sql(h.store)).view(task_id)
    return view.task.state.value, view.display.label, view.queue_position


async def running(h: Harness) -> str:
    """lt-1 started by a watcher round: its attempt's id."""
    await queued(h)
    assert (await watcher(h).run_once()).started == ["lt-1"]
    return (await lease(h))[0]


async def test_an_attempt_continues_later_and_its_task_waits_until_due(h: Harness) -> None:
    attempt = await running(h)
    due = START + 2 * H  # 10:00
    changed = await h.door.continue_later("lt-1", attempt, at(due))
    assert changed.task.state is T.QUEUED and changed.task.lease is None
    [a] = await h.sql.attempts(None, "lt-1")
    assert (a.outcome, a.reason) == (
        AttemptOutcome.CONTINUES_LATER,
        "continues later: continue tomorrow 09:00",
    )
    assert await view_of(h) == (
        "queued",
        "waiting for its continuation at 10:00 (truerun must be running)",
        None,
    )
    # a retried call of the same attempt changes nothing
    again = await h.door.continue_later("lt-1", attempt, at(due))
    assert again.task.state_version == changed.task.state_version
    w = watcher(h)
    h.clock.now = due - 1
    assert (await w.run_once()).started == []  # held: not waiting for a slot
    h.clock.now = due + 1
    done = await w.run_once()
    assert (done.continued, done.started) == (["lt-1"], ["lt-1"])
    assert len(await h.sql.attempts(None, "lt-1")) == 2
    assert await h.door.fire_continuation("lt-1") is None  # a duplicate firing: nothing
    types = [t for t, _ in await events(h, "lt-1")]
    assert types.count("continuation_fired") == 1


async def test_offline_across_three_windows_coalesces_into_one_attempt(h: Harness) -> None:
    attempt = await running(h)  # 08:00:00.001
    await h.door.continue_later("lt-1", attempt, hourly())  # the next window: 09:00
    h.clock.now += 4 * H + 10 * M  # down at 09:00, 10:00, 11:00; 12:00 is in the window
    done = await watcher(h).run_once()
    assert (done.continued, done.started) == (["lt-1"], ["lt-1"])
    assert len(await h.sql.attempts(None, "lt-1")) == 2  # one attempt, not four
    [fired] = [e for e in await h.sql.events("lt-1") if e.type == "continuation_fired"]
    assert fired.message == (
        "continuation due 12:00 released the task; missed 3 continuations while truerun was "
        "not running (09:00..11:00, outside the 15m catch-up window)"
    )
    c = await h.sql.continuation(None, "lt-1")
    assert c is not None and (c.missed_total, c.fired_at_ms) == (3, h.clock.now)


async def test_all_missed_reports_them_and_waits_for_the_next_window(h: Harness) -> None:
    attempt = await running(h)
    await h.door.continue_later("lt-1", attempt, hourly())
    h.clock.now += 4 * H + 30 * M  # 09:00..12:00 all outside the 15 min window at 12:30
    w = watcher(h)
    done = await w.run_once()
    assert (done.continued, done.started) == ([], [])
    assert await state(h) is T.QUEUED
    [missed] = [e for e in await h.sql.events("lt-1") if e.type == "continuation_missed"]
    assert missed.message == (
        "missed 4 continuations while truerun was not running (09:00..12:00, outside the 15m "
        "catch-up window); waiting for its next window at 13:00 (truerun must be running)"
    )
    assert (await view_of(h))[1] == "waiting for its next window at 13:00 (truerun must be running)"
    assert (await w.run_once()).started == []  # still waiting, no second report
    assert [e.type for e in await h.sql.events("lt-1")].count("continuation_missed") == 1
    h.clock.now += 30 * M  # 13:00:00.001
    assert (await w.run_once()).started == ["lt-1"]


async def test_two_watchers_firing_one_continuation_start_one_attempt(h: Harness) -> None:
    attempt = await running(h)
    await h.door.continue_later("lt-1", attempt, hourly())
    h.clock.now += 3 * H + 10 * M
    rounds = await asyncio.gather(
        watcher(h, name="w1").run_once(), watcher(h, name="w2").run_once()
    )
    assert [t for r in rounds for t in r.continued] == ["lt-1"]
    assert len(await h.sql.attempts(None, "lt-1")) == 2
    assert [e.type for e in await h.sql.events("lt-1")].count("continuation_fired") == 1


async def test_a_continuation_the_task_moved_past_is_dropped_saying_so(h: Harness) -> None:
    attempt = await running(h)
    changed = await h.door.continue_later("lt-1", attempt, at(h.clock.now + H))
    paused = await h.door.pause("lt-1", changed.task.state_version, ANA)
    await h.door.resume("lt-1", paused.task.state_version, ANA)
    w = watcher(h)
    assert (await w.run_once()).started == ["lt-1"]  # resumed: no longer held
    h.clock.now += H
    assert (await w.run_once()).continued == []
    [dropped] = [e for e in await h.sql.events("lt-1") if e.type == "continuation_dropped"]
    assert dropped.message.startswith("continuation dropped: scheduled at version")
    assert len(await h.sql.attempts(None, "lt-1")) == 2


async def test_a_person_schedules_a_planned_task_and_is_refused_on_a_running_one(
    h: Harness,
) -> None:
    h.clock.now += 1
    created = await h.door.create(new_task("lt-2"), ANA)
    asked = Continuation("lt-2", ContinuationKind.AT, 0, START + H)
    changed = await h.door.schedule_continuation("lt-2", created.task.state_version, ANA, asked)
    assert changed.task.state is T.QUEUED
    assert (await view_of(h, "lt-2"))[1].startswith("waiting for its continuation at 09:00")
    assert (await watcher(h).run_once()).started == []
    attempt = await running(h)
    assert attempt
    task = await h.sql.get_task("lt-1")
    assert task is not None
    before = await snapshot(h.store)
    with pytest.raises(InvalidLongTaskTransition):
        await h.door.schedule_continuation("lt-1", task.state_version, ANA, at(h.clock.now + H))
    assert await snapshot(h.store) == before
