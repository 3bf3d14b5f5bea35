"""The project event stream (docs/events.md), on SQLite and real PostgreSQL: a reader tailing it
while many writers commit gets every committed event exactly once, in cursor order, each run's
events in sequence order, and resuming from any cursor it received gives exactly the rest."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from itertools import pairwise

from coordinator.domain import commands as c
from coordinator.domain.cursor import EventCursor
from coordinator.domain.model import RunEvent
from coordinator.service.transitions import Transitions
from coordinator.store.base import RunStore
from kernel.db.migrate import upgrade
from services.bootstrap import open_store
from tests.support.factories import USER, spec

WRITERS = 6
RUNS_PER_WRITER = 8
DEADLINE = 60.0


async def tail(store: RunStore, project: str, total: asyncio.Future[int]) -> list[RunEvent]:
    """Page through the project's stream (small random pages) until ``total`` events came.
    (On PostgreSQL any transaction in the cluster, other tests' too, may delay the last ones.)"""
    got: list[RunEvent] = []
    after: EventCursor | None = None
    rng = random.Random(7)
    while not (total.done() and len(got) >= total.result()):
        page = await store.list_project_events(project, after, rng.randint(1, 7))
        got.extend(page)
        if page:
            after = page[-1].cursor
        else:
            await asyncio.sleep(0.01)
    return got


async def stable(read: Callable[[], Awaitable[Sequence[RunEvent]]], n: int) -> list[RunEvent]:
    """``read()`` once it returns at least ``n`` events (see ``tail``)."""
    async with asyncio.timeout(DEADLINE):
        while len(events := await read()) < n:
            await asyncio.sleep(0.02)
    return list(events)


async def write_runs(transitions: Transitions, project: str, n: int) -> list[str]:
    """Each run: created pending approval, approved (queued), cancelled: three commits."""
    run_ids = []
    for _ in range(n):
        created = await transitions.create(spec(project_id=project, requires_approval=True))
        await transitions.execute(c.Approve(created.run.id, USER))
        await transitions.execute(c.RequestCancel(created.run.id, USER))
        run_ids.append(created.run.id)
    return run_ids


async def committed_events(store: RunStore, project: str) -> list[RunEvent]:
    events: list[RunEvent] = []
    after: EventCursor | None = None
    while page := await store.list_project_events(project, after, 1000):
        events.extend(page)
        after = page[-1].cursor
    return events


async def test_tailing_reader_gets_every_commit_once_in_order(migrated_database_url: str) -> None:
    # Two store instances (two pools on PostgreSQL): writers commit through both.
    stores = [await open_store(migrated_database_url) for _ in range(2)]
    try:
        reader = stores[0]
        total: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        tailing = asyncio.create_task(tail(reader, "proj-a", total))
        projects = ["proj-a" if i % 3 else "proj-b" for i in range(WRITERS)]
        writers = [
            write_runs(Transitions(stores[i % 2]), project, RUNS_PER_WRITER)
            for i, project in enumerate(projects)
        ]
        written = await asyncio.wait_for(asyncio.gather(*writers), DEADLINE)
        expected: dict[str, list[RunEvent]] = {}
        for project, run_ids in zip(projects, written, strict=True):
            for run_id in run_ids if project == "proj-a" else ():
                expected[run_id] = list(await reader.list_events(run_id, 0, 1000))
        total.set_result(sum(len(events) for events in expected.values()))
        got = await asyncio.wait_for(tailing, DEADLINE)

        ids = [e.id for e in got]
        assert len(ids) == len(set(ids)), "an event was delivered twice"
        assert {e.project_id for e in got} == {"proj-a"}
        assert len(expected) == projects.count("proj-a") * RUNS_PER_WRITER
        assert sorted(ids) == sorted(e.id for events in expected.values() for e in events)
        cursors = [e.cursor for e in got if e.cursor is not None]
        assert len(cursors) == len(got)
        assert all(a < b for a, b in pairwise(cursors)), "cursors not strictly increasing"
        encoded = [cur.encode() for cur in cursors]
        assert encoded == sorted(encoded), "the wire form sorts like the cursor"
        for run_id, events in expected.items():
            seen = [e.sequence for e in got if e.run_id == run_id]
            assert seen == [e.sequence for e in events] == list(range(1, len(events) + 1))

        assert await committed_events(reader, "proj-a") == got
        for i in random.Random(3).sample(range(len(got)), 12):
            rest: list[RunEvent] = []
            after = got[i].cursor
            while page := await stores[1].list_project_events("proj-a", after, 5):
                rest.extend(page)
                after = page[-1].cursor
            assert [e.id for e in rest] == ids[i + 1 :]
        n_b = projects.count("proj-b") * RUNS_PER_WRITER * 3
        others = await stable(lambda: committed_events(reader, "proj-b"), n_b)
        assert {e.project_id for e in others} == {"proj-b"}
        assert not set(ids) & {e.id for e in others}
    finally:
        for store in stores:
            await store.close()


async def test_empty_project_and_end_of_stream(store: RunStore) -> None:
    assert await store.list_project_events("nobody", None, 10) == []
    transitions = Transitions(store)
    created = await transitions.create(spec(project_id="p1"))
    n = created.run.event_sequence
    events = await stable(lambda: committed_events(store, "p1"), n)
    assert [(e.run_id, e.sequence) for e in events] == [(created.run.id, i + 1) for i in range(n)]
    assert events[-1].cursor is not None
    assert await store.list_project_events("p1", events[-1].cursor, 10) == []
    assert await store.last_event_cursor() == events[-1].cursor
    everything = await store.list_project_events(None, None, 10)
    assert [e.id for e in everything] == [e.id for e in events]


async def test_an_open_older_transaction_holds_later_commits_back(pg_url: str) -> None:
    """PostgreSQL commits out of transaction-id order: a transaction that started writing
    first may commit last. Its events sort first, so the reader returns nothing committed
    after it began until it ends: delayed, never skipped."""
    await upgrade(pg_url)
    store = await open_store(pg_url)
    try:
        transitions = Transitions(store)
        slow = await transitions.create(spec(project_id="p", requires_approval=True))
        fast = await transitions.create(spec(project_id="p", requires_approval=True))
        n = slow.run.event_sequence + fast.run.event_sequence
        after = (await stable(lambda: committed_events(store, "p"), n))[-1].cursor
        wrote, finish = asyncio.Event(), asyncio.Event()

        async def slow_writer() -> None:
            async with transitions.transaction(["hold"]) as tx:
                await transitions.execute_in(tx, c.Approve(slow.run.id, USER))
                wrote.set()
                await finish.wait()

        holder = asyncio.create_task(slow_writer())
        await asyncio.wait_for(wrote.wait(), DEADLINE)
        await transitions.execute(c.Approve(fast.run.id, USER))  # commits first
        assert len(await store.list_events(fast.run.id, 0, 100)) > fast.run.event_sequence
        assert await store.list_project_events("p", after, 100) == []
        finish.set()
        await asyncio.wait_for(holder, DEADLINE)
        new = [
            len(await store.list_events(run_id, run.event_sequence, 100))
            for run_id, run in ((slow.run.id, slow.run), (fast.run.id, fast.run))
        ]
        later = await stable(lambda: store.list_project_events("p", after, 100), sum(new))
        assert len(later) == sum(new)
        assert [e.run_id for e in later][:1] == [slow.run.id], "the older transaction sorts first"
        assert {e.run_id for e in later} == {slow.run.id, fast.run.id}
    finally:
        await store.close()


async def test_a_run_stays_in_sequence_order_when_an_older_transaction_writes_it_later(
    pg_url: str,
) -> None:
    """Transaction T2 takes its id (writing run A) before T1 writes run B and commits; T2 then
    writes B too. T2's id is the older one, yet its event on B follows T1's: the event's
    tx_id is raised to the run's previous event's, so B stays in sequence order."""
    await upgrade(pg_url)
    store = await open_store(pg_url)
    try:
        transitions = Transitions(store)
        a = await transitions.create(spec(project_id="p", requires_approval=True))
        b = await transitions.create(spec(project_id="p", requires_approval=True))
        wrote_a, b_committed = asyncio.Event(), asyncio.Event()

        async def older() -> None:
            async with transitions.transaction(["older"]) as tx:
                await transitions.execute_in(tx, c.Approve(a.run.id, USER))
                wrote_a.set()
                await b_committed.wait()
                await transitions.execute_in(tx, c.RequestCancel(b.run.id, USER))

        t2 = asyncio.create_task(older())
        await asyncio.wait_for(wrote_a.wait(), DEADLINE)
        await transitions.execute(c.Approve(b.run.id, USER))  # T1
        b_committed.set()
        await asyncio.wait_for(t2, DEADLINE)
        b_events = list(await store.list_events(b.run.id, 0, 100))
        stream = await stable(
            lambda: committed_events(store, "p"), a.run.event_sequence + len(b_events) + 1
        )
        assert [e.sequence for e in stream if e.run_id == b.run.id] == [
            e.sequence for e in b_events
        ]
        assert [e.type for e in b_events][-1] == "run.cancelled"
    finally:
        await store.close()
