"""GroupCommit's own rules, over fake writes: the group bound, a store failure reaching
every member, and a cancelled caller never cutting its group's write short."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import cast

import pytest

from coordinator.domain.decide import Decision
from coordinator.service.group_commit import GroupCommit
from coordinator.store.base import Applied, IdempotencyKeyTaken, RequestRecord


def _decision(n: int) -> Decision:
    return cast(Decision, n)  # the fakes below only pass it through


class Writes:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.groups: list[list[int]] = []
        self.fail = fail
        self.gate = asyncio.Event()
        self.gate.set()
        self.finished = 0

    async def one(self, decision: Decision, request: RequestRecord | None) -> Applied:
        self.groups.append([cast(int, decision)])
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.finished += 1
        return cast(Applied, ("applied", decision))

    async def many(self, creates: Sequence[tuple[Decision, RequestRecord | None]]) -> list[Applied]:
        self.groups.append([cast(int, d) for d, _ in creates])
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.finished += len(creates)
        return [cast(Applied, ("applied", d)) for d, _ in creates]


async def test_groups_are_bounded_and_answers_are_each_callers_own() -> None:
    writes = Writes()
    group = GroupCommit(writes.one, writes.many, limit=4)
    answers = await asyncio.gather(*(group.write(_decision(i), None) for i in range(10)))
    assert answers == [cast(Applied, ("applied", i)) for i in range(10)]
    assert writes.groups == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_a_store_failure_reaches_every_member() -> None:
    writes = Writes(fail=OSError("connection lost"))
    group = GroupCommit(writes.one, writes.many)
    outcomes = await asyncio.gather(
        *(group.write(_decision(i), None) for i in range(3)), return_exceptions=True
    )
    assert [type(o) for o in outcomes] == [OSError] * 3
    assert writes.groups == [[0, 1, 2]]  # not retried one by one: it may have been anything


async def test_a_collision_writes_each_member_alone() -> None:
    writes = Writes(fail=IdempotencyKeyTaken("uq_runs_project_idempotency_key"))
    group = GroupCommit(writes.one, writes.many)
    outcomes = await asyncio.gather(
        *(group.write(_decision(i), None) for i in range(3)), return_exceptions=True
    )
    assert [type(o) for o in outcomes] == [IdempotencyKeyTaken] * 3
    assert writes.groups == [[0, 1, 2], [0], [1], [2]]


async def test_a_cancelled_caller_does_not_cut_the_write_short() -> None:
    writes = Writes()
    writes.gate.clear()
    group = GroupCommit(writes.one, writes.many)
    gone = asyncio.create_task(group.write(_decision(0), None))
    stays = asyncio.create_task(group.write(_decision(1), None))
    while not writes.groups:
        await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    writes.gate.set()
    assert await stays == cast(Applied, ("applied", 1))
    assert writes.finished == 2  # the cancelled caller's create was still written


async def _turns_until(done: Callable[[], bool]) -> None:
    for _ in range(100):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the group commit never got there")


async def test_at_most_writers_writes_are_in_flight() -> None:
    writes = Writes()
    writes.gate.clear()
    group = GroupCommit(writes.one, writes.many, writers=2)
    first = asyncio.create_task(group.write(_decision(0), None))
    await _turns_until(lambda: len(writes.groups) == 1)
    beside = [asyncio.create_task(group.write(_decision(i), None)) for i in (1, 2, 3)]
    await _turns_until(lambda: len(writes.groups) == 2)  # written while the first is held
    late = [asyncio.create_task(group.write(_decision(i), None)) for i in (4, 5)]
    await _turns_until(lambda: group.waiting == 2)
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(writes.groups) == 2  # both writers busy: the late ones wait
    writes.gate.set()
    answers = await asyncio.gather(first, *beside, *late)
    assert answers == [cast(Applied, ("applied", i)) for i in range(6)]
    assert writes.groups == [[0], [1, 2, 3], [4, 5]]


async def test_a_writer_cancelled_while_forming_leaves_no_create_stranded() -> None:
    writes = Writes()
    group = GroupCommit(writes.one, writes.many, writers=1)
    gone = asyncio.create_task(group.write(_decision(0), None))
    await asyncio.sleep(0)  # its writer is forming the group
    (writer,) = group._writers
    writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writer
    gone.cancel()
    answer = await asyncio.wait_for(group.write(_decision(1), None), timeout=10)
    assert answer == cast(Applied, ("applied", 1))
