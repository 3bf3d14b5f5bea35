"""Group commit of creates (coordinator/service/group_commit.py) on SQLite and PostgreSQL:
concurrent plain creates share one store write, a lone one is written at once, and one
member's collision never fails the others."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import cast

import pytest

from coordinator.domain.states import RunStatus
from coordinator.service.transitions import Result, Transitions
from coordinator.store.base import (
    RequestIdTaken,
    RequestRecord,
    RunFilter,
    RunStore,
)
from coordinator.store.snapshots import decode, run_from_snapshot
from tests.support.factories import spec
from tests.support.recording_store import Recording


async def _tx_ids(store: RunStore, results: Sequence[Result]) -> set[int]:
    """The database's own transaction ids that wrote these runs' events (PostgreSQL)."""
    ids = set()
    for result in results:
        for event in await store.list_events(result.run.id, 0, 10):
            assert event.cursor is not None
            ids.add(event.cursor.tx_id)
    return ids


async def _until_waiting(transitions: Transitions, count: int) -> None:
    async def waiting() -> None:
        while transitions.creates_waiting < count:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(waiting(), timeout=10)


async def test_concurrent_creates_share_one_write(store: RunStore, database_url: str) -> None:
    recording = Recording(store)
    transitions = Transitions(cast(RunStore, recording))
    requests = {i: RequestRecord(f"req-{i}", "CreateRun", f"hash-{i}") for i in range(0, 50, 10)}
    results = await asyncio.gather(
        *(transitions.create(spec(task_id=f"t{i}"), request=requests.get(i)) for i in range(50))
    )
    assert len({r.run.id for r in results}) == 50
    assert sum(n for _, n in recording.writes) == 50
    assert len(recording.writes) < 50 and recording.writes[0] == ("group", 50)
    for i, result in enumerate(results):
        loaded = await store.load(result.run.id)
        assert loaded is not None and loaded.run == result.run and loaded.attempt == result.attempt
        assert loaded.run.task_id == f"t{i}" and loaded.run.status is RunStatus.QUEUED
        stored = await store.list_events(result.run.id, 0, 10)
        assert [e.id for e in stored] == [e.id for e in result.events]
        assert [e.sequence for e in stored] == list(range(1, len(result.events) + 1))
        assert loaded.run.event_sequence == len(result.events)
    alone = await Transitions(store).create(spec())
    assert [e.type for e in alone.events] == [e.type for e in results[0].events]
    for i, request in requests.items():  # each record beside its own run, same commit
        record = await store.get_request(request.request_id)
        assert record is not None and record.payload_hash == request.payload_hash
        snapshot = decode(record.snapshot)
        assert snapshot is not None
        assert run_from_snapshot(snapshot).run == results[i].run
    if database_url.startswith("postgres"):  # one transaction of PostgreSQL wrote them all
        assert len(await _tx_ids(store, results)) == len(recording.writes) == 1


async def test_a_lone_create_is_written_at_once(store: RunStore) -> None:
    recording = Recording(store)
    transitions = Transitions(cast(RunStore, recording))
    created = await transitions.create(spec())
    assert recording.writes == [("one", 1)]  # today's single write, nobody waited for
    assert transitions.creates_waiting == 0
    loaded = await store.load(created.run.id)
    assert loaded is not None and loaded.run == created.run


async def _until_held(recording: Recording) -> None:
    """Until every write the recording holds has reached its gate."""

    async def held() -> None:
        while recording.hold > 0:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(held(), timeout=10)


async def test_creates_arriving_during_a_write_go_together_next(
    store: RunStore, database_url: str
) -> None:
    """One writer: creates that arrive while it writes queue up and are the next group."""
    recording = Recording(store, hold=1)
    transitions = Transitions(cast(RunStore, recording), create_writers=1)
    first = asyncio.create_task(transitions.create(spec(task_id="first")))
    await recording.entered.wait()  # the first write is in flight: the rest must queue
    rest = [asyncio.create_task(transitions.create(spec(task_id=f"t{i}"))) for i in range(10)]
    await _until_waiting(transitions, 10)
    recording.release.set()
    done = await asyncio.gather(first, *rest)
    assert recording.writes == [("one", 1), ("group", 10)]
    if database_url.startswith("postgres"):
        assert len(await _tx_ids(store, done)) == 2


async def test_the_next_group_is_written_beside_the_last_and_then_they_wait(
    store: RunStore, database_url: str
) -> None:
    """Two writers (the default): while one group is written the next forms and is written
    beside it; creates that arrive while both are busy queue up and go together next."""
    recording = Recording(store, hold=2)
    transitions = Transitions(cast(RunStore, recording))
    first = asyncio.create_task(transitions.create(spec(task_id="first")))
    await recording.entered.wait()
    beside = [asyncio.create_task(transitions.create(spec(task_id=f"b{i}"))) for i in range(6)]
    await _until_held(recording)  # both writers are in flight, neither has finished
    assert transitions.creates_waiting == 0
    late = [asyncio.create_task(transitions.create(spec(task_id=f"l{i}"))) for i in range(4)]
    await _until_waiting(transitions, 4)
    recording.release.set()
    done = await asyncio.gather(first, *beside, *late)
    assert recording.writes == [("one", 1), ("group", 6), ("group", 4)]
    assert len({r.run.id for r in done}) == 11
    if database_url.startswith("postgres"):
        assert len(await _tx_ids(store, done)) == 3


async def test_one_members_collision_fails_no_other(store: RunStore) -> None:
    """A group with two creates of one new idempotency key and one create whose request id
    is already recorded: nothing of the group is written together; written one by one, each
    member gets exactly a lone create's answer."""
    taken = RequestRecord("req-taken", "CreateRun", "h")
    earlier = await Transitions(store).create(spec(task_id="earlier"), request=taken)
    recording = Recording(store, hold=1)
    # one writer, so the eight (the keyed ones read first) all queue behind the first write
    transitions = Transitions(cast(RunStore, recording), create_writers=1)
    first = asyncio.create_task(transitions.create(spec(task_id="first")))
    await recording.entered.wait()
    plain = [asyncio.create_task(transitions.create(spec(task_id=f"p{i}"))) for i in range(5)]
    keyed = [asyncio.create_task(transitions.create(spec(idempotency_key="k"))) for _ in range(2)]
    twin = asyncio.create_task(transitions.create(spec(task_id="twin"), request=taken))
    await _until_waiting(transitions, 8)
    recording.release.set()
    await first
    made = await asyncio.gather(*plain)
    one, other = await asyncio.gather(*keyed)
    with pytest.raises(RequestIdTaken):
        await twin
    assert recording.writes == [("one", 1), ("group", 8)] + [("one", 1)] * 8
    assert len({r.run.id for r in made}) == 5 and not any(r.existing for r in made)
    assert one.run.id == other.run.id and sorted([one.existing, other.existing]) == [False, True]
    listed = await store.list_runs(RunFilter(project_id="proj"), None, 100)
    assert sorted(r.run.task_id for r in listed) == sorted(
        ["earlier", "first", "task"] + [f"p{i}" for i in range(5)]
    )
    record = await store.get_request("req-taken")
    assert record is not None
    snapshot = decode(record.snapshot)
    assert snapshot is not None and run_from_snapshot(snapshot).run.id == earlier.run.id
