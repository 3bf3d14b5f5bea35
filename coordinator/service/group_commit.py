"""Group commit of plain creates: concurrent CreateRun calls share one store write.

The first create that finds no write in flight is written after GATHER_TURNS turns of the
event loop (no timer: creates whose calls the loop is already handling join it; a lone call
on an idle server waits microseconds). Creates that arrive while a write is in flight queue
up and go together, up to ``limit`` of them, as soon as that write finishes and the loop has
turned again, so the window is the previous write's duration. A write of one create is
exactly today's single write; a write of several is one transaction (one multi-row
statement on PostgreSQL). When a member of a group collides (an idempotency key or an
AIP-155 request id another transaction or another member holds; on PostgreSQL also a
deadlock with another writer), nothing of the group was written and its members are
written again one by one, each with the single write's exact answer, so one member's
collision never fails the others.

The writes run in a task of their own, not in any caller's: a caller that is cancelled (a
client that went away) abandons its answer but never cuts the group's write short.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from coordinator.domain.decide import Decision
from coordinator.store.base import (
    Applied,
    CasMiss,
    IdempotencyKeyTaken,
    RequestIdTaken,
    RequestRecord,
)

#: What one member's collision raises: the group wrote nothing, so each member is retried
#: alone (CasMiss: PostgreSQL broke a deadlock between two groups; nothing was written).
COLLISIONS = (IdempotencyKeyTaken, RequestIdTaken, CasMiss)

#: Turns of the event loop a group waits for creates on their way: at 8 producers, 0 turns
#: made groups of 2.3 creates, 1 of 2.6, 2 of 2.9 (bench.pairs: each step ~5 % more runs a
#: second); stopping once a turn brought nothing stayed at 2.6 (issue #16).
GATHER_TURNS = 2

WriteOne = Callable[[Decision, RequestRecord | None], Awaitable[Applied]]
WriteMany = Callable[[Sequence[tuple[Decision, RequestRecord | None]]], Awaitable[list[Applied]]]


class _Member:
    """One create waiting for its group's write, and the future its answer goes to."""

    __slots__ = ("answer", "decision", "request")

    def __init__(self, decision: Decision, request: RequestRecord | None) -> None:
        self.decision = decision
        self.request = request
        self.answer: asyncio.Future[Applied] = asyncio.get_running_loop().create_future()


class GroupCommit:
    """Collects concurrent creates into group writes (see the module docstring)."""

    def __init__(self, write_one: WriteOne, write_many: WriteMany, limit: int = 64) -> None:
        if limit < 1:
            raise ValueError("a group holds at least one create")
        self._write_one = write_one
        self._write_many = write_many
        self._limit = limit
        self._waiting: deque[_Member] = deque()
        self._writer: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Creates queued for the next group write (not yet being written)."""
        return len(self._waiting)

    async def write(self, decision: Decision, request: RequestRecord | None) -> Applied:
        """Write one create's decision (with its AIP-155 record) in the next group; raises
        exactly what the single write (``RunStore.apply``) would raise for it."""
        member = _Member(decision, request)
        # A caller cancelled while it waits never reads its answer: mark it read anyway.
        member.answer.add_done_callback(_consumed)
        self._waiting.append(member)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())
        # Awaited as is, not shielded: cancelling the caller cancels only this answer, never
        # the writer's task, and _settle skips an answer nobody waits for (a shield would
        # cost a future and a turn of the loop on every create).
        return await member.answer

    async def _drain(self) -> None:
        try:
            while self._waiting:
                await self._gather()
                count = min(self._limit, len(self._waiting))
                group = [self._waiting.popleft() for _ in range(count)]
                await self._write_group(group)
        finally:
            self._writer = None

    async def _gather(self) -> None:
        """Let the event loop turn GATHER_TURNS times (fewer once the group is full), so
        creates whose calls it is already handling join: no timer, and a lone create on an
        idle server waits microseconds."""
        for _ in range(GATHER_TURNS):
            if len(self._waiting) >= self._limit:
                return
            await asyncio.sleep(0)

    async def _write_group(self, group: list[_Member]) -> None:
        try:
            await self._write_members(group)
        except BaseException as exc:  # the writer itself was cancelled: nobody waits forever
            for member in group:
                _settle(member, exc)
            raise

    async def _write_members(self, group: list[_Member]) -> None:
        if len(group) > 1:
            try:
                written = await self._write_many([(m.decision, m.request) for m in group])
            except COLLISIONS:
                pass  # nothing was written: each member alone below, with its own answer
            except Exception as exc:  # the store failed for all of them alike
                for member in group:
                    _settle(member, exc)
                return
            else:
                for member, applied in zip(group, written, strict=True):
                    _settle(member, applied)
                return
        for member in group:
            try:
                _settle(member, await self._write_one(member.decision, member.request))
            except Exception as exc:
                _settle(member, exc)


def _consumed(answer: asyncio.Future[Applied]) -> None:
    if not answer.cancelled():
        answer.exception()


def _settle(member: _Member, outcome: Applied | BaseException) -> None:
    if member.answer.done():
        return
    if isinstance(outcome, Exception):
        member.answer.set_exception(outcome)
    elif isinstance(outcome, BaseException):
        member.answer.cancel()
    else:
        member.answer.set_result(outcome)
