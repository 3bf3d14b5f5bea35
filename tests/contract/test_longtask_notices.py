"""The notices outbox through the long-task door on SQLite and real PostgreSQL
(docs/long-tasks.md "Notices"): the notice is written in the change's own transaction, one
per fact; one crash seen by both process start (``held_by_the_dead``) and the watcher
(``attempt_ended``) is one interruption notice, whichever runs first or both at once; a
second writer of the same dedupe key inserts nothing; a notice gets one pending delivery
per webhook of its owner in the same commit; queued raises none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from longtasks.domain.states import TaskState
from longtasks.service.notices import NoticeDesk
from longtasks.store.notice_sql import StoredNotice
from services.bootstrap import open_store
from tests.support.clock import Clock
from tests.support.longtasks import Harness, harness, new_task, read, running

T = TaskState


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


async def notices(h: Harness) -> list[tuple[str, str, str]]:
    rows = await read(
        h.store, "SELECT kind, dedupe_key, task_state FROM long_task_notices ORDER BY id"
    )
    return [(r["kind"], r["dedupe_key"], r["task_state"]) for r in rows]


async def test_one_crash_seen_by_process_start_and_the_watcher_is_one_notice(h: Harness) -> None:
    """Three tasks, one crash each, seen by both paths in each order; queued and running
    raised no notice before."""
    attempts = {}
    for task_id in ("lt-1", "lt-2", "lt-3"):
        started = await running(h, new_task(task_id))
        assert started.made is not None
        attempts[task_id] = started.made
    assert await notices(h) == []  # created, queued, started: nothing to tell
    orders = ("start_then_watcher", "watcher_then_start", "together")
    for task_id, order in zip(attempts, orders, strict=True):
        live = {a for t, a in attempts.items() if t != task_id}
        at_start = h.door.held_by_the_dead(live)
        by_watcher = h.door.attempt_ended(task_id, attempts[task_id], "its run was lost")
        if order == "together":
            await asyncio.gather(at_start, by_watcher)
        elif order == "start_then_watcher":
            await at_start
            await by_watcher
        else:
            await by_watcher
            await at_start
        task = await h.sql.get_task(task_id)
        assert task is not None and task.state is T.QUEUED  # no step began: it resumes
    # the run layer (the runs lost or failed) writes none; each crash is one notice
    assert sorted(await notices(h)) == sorted(
        ("interruption", f"interruption:{task_id}:{attempt}", "queued")
        for task_id, attempt in attempts.items()
    )


async def test_a_second_writer_of_a_dedupe_key_inserts_nothing_and_deliveries_follow(
    h: Harness,
) -> None:
    await running(h)
    notice = StoredNotice(
        "n-1",
        "lt-1",
        "proj",
        "ana",
        1,
        "terminal",
        "terminal:lt-1:1",
        None,
        "failed",
        5,
        "#1 failed",
        "text",
        1,
    )
    async with h.app.transitions.transaction([]) as tx:
        assert await h.sql.insert_notice(tx, notice)
    async with h.app.transitions.transaction([]) as tx:
        assert not await h.sql.insert_notice(tx, replace(notice, id="n-2"))
    assert await notices(h) == [("terminal", "terminal:lt-1:1", "failed")]
    await _deliveries(h)


async def _deliveries(h: Harness) -> None:
    """A notice gets one pending delivery per webhook of its owner, in its commit."""
    desk = NoticeDesk(h.app.transitions, h.sql, b"k" * 32, clock=h.clock)
    user = Actor(ActorType.USER, "ana")
    mine, secret = await desk.register("proj", "ana", "http://127.0.0.1:9/a", user)
    again, rotated = await desk.register("proj", "ana", "http://127.0.0.1:9/a", user)
    assert (again.id, again.generation) == (mine.id, 2) and rotated != secret
    await desk.register("proj", "bea", "http://127.0.0.1:9/b", user)  # another owner's
    await desk.register("other", "ana", "http://127.0.0.1:9/c", user)  # another project's
    attempt = (await running(h, new_task("lt-2"))).made
    assert attempt is not None
    await h.door.request_approval("lt-2", attempt, "send:team", "may I send it?")
    [_, notice] = await desk.notices("proj", "ana", (-1, ""), 10)
    assert notice.kind == "approval" and notice.task_state == "waiting_for_approval"
    deliveries = await desk.deliveries("proj", "ana", "", 10)
    assert [(d.notice_id, d.webhook_id, d.state, d.tries) for d in deliveries] == [
        (notice.id, mine.id, "pending", 0)
    ]
    assert await desk.notices("proj", "bea", (-1, ""), 10) == []
    assert await desk.notices("other", "ana", (-1, ""), 10) == []
