"""Group commit of plain creates: concurrent CreateRun calls share one store write.

A create that finds no group forming starts one, written after GATHER_TURNS turns of the
event loop (no timer: creates whose calls the loop is already handling join it; a lone call
on an idle server waits microseconds). Up to WRITERS group writes are in flight at once, each
on its own store connection: while one is being written the next group forms, and creates
that arrive while every writer is busy queue up and go together, up to ``limit`` of them, as
soon as a write finishes, so the window is a write's duration. A write of one create is
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

#: Group writes in flight at once. One made each create wait for the write before its own:
#: at 8 producers a group write took ~3.5 ms and a create ~5.5 ms in the group commit; with
#: two, the next group is written while the last one's commit is on its way (issue #16).
WRITERS = 2

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

    def __init__(
        self, write_one: WriteOne, write_many: WriteMany, limit: int = 64, writers: int = WRITERS
    ) -> None:
        if limit < 1 or writers < 1:
            raise ValueError("a group holds at least one create, and one writer writes")
        self._write_one = write_one
        self._write_many = write_many
        self._limit = limit
        self._most_writers = writers
        self._waiting: deque[_Member] = deque()
        self._writers: set[asyncio.Task[None]] = set()
        self._former: asyncio.Task[None] | None = None  # the writer gathering the next group

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
        self._start_writer()
        # Awaited as is, not shielded: cancelling the caller cancels only this answer, never
        # the writer's task, and _settle skips an answer nobody waits for (a shield would
        # cost a future and a turn of the loop on every create).
        return await member.answer

    def _start_writer(self) -> None:
        """A writer for the waiting creates, unless one is already forming a group (they
        join it) or every writer is busy (the first to finish takes them)."""
        if self._former is not None or not self._waiting:
            return
        if len(self._writers) >= self._most_writers:
            return
        writer = asyncio.get_running_loop().create_task(self._drain())
        self._former = writer
        self._writers.add(writer)
        writer.add_done_callback(self._gone)

    def _gone(self, writer: asyncio.Task[None]) -> None:
        # also for a writer cancelled before it ever ran: the next create forms anew
        self._writers.discard(writer)
        if self._former is writer:
            self._former = None

    async def _drain(self) -> None:
        """Form a group and write it, again while creates wait and no other writer forms."""
        me = asyncio.current_task()
        assert me is not None
        try:
            while True:
                await self._gather()
                count = min(self._limit, len(self._waiting))
                group = [self._waiting.popleft() for _ in range(count)]
                self._former = None
                self._start_writer()  # the next group forms while this one is written
                await self._write_group(group)
                if self._former is not None or not self._waiting:
                    return
                self._former = me
        finally:
            self._gone(me)  # at once, so a create arriving next finds room

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
