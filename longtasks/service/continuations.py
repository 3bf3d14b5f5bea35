"""Continuations through the door (docs/long-tasks.md "Continuations and catch-up"): the
attempt asks for its next attempt later and ends; a person asks for it on a task without a
live attempt; the watcher fires what is due. Each is one transaction of the door
(``base.py``): the task row locked, versions compared, the continuation row and the task's
event written together.

A continuation names the task's version it was scheduled at (the version this transaction
makes: ``before + 1``); it holds the queued task back from the scheduler only while that is
still the task's version. A duplicate firing, a firing after a person moved the task, a
repeated request of an attempt that already ended for it: each changes nothing (or only
drops the stale row, saying so)."""

from __future__ import annotations

from dataclasses import replace

from coordinator.domain.model import Actor
from kernel.errors import LongTaskLeaseNotHeld
from longtasks.domain.continuations import (
    Continuation,
    Firing,
    first_due,
    plan_firing,
    waiting_text,
)
from longtasks.domain.rules import Refusal, Refused, TaskCommand
from longtasks.domain.states import AttemptOutcome, StepState, TaskState
from longtasks.service.base import SYSTEM, DoorBase, Work
from longtasks.service.errors import step_error, task_error
from longtasks.service.inputs import Changed
from longtasks.service.steps import attempt_actor

C = TaskCommand
#: What a person's continuation does to the task, by its state (no live attempt in any).
_PERSON_MOVES: dict[TaskState, TaskCommand | None] = {
    TaskState.PLANNED: C.ENQUEUE,
    TaskState.PAUSED: C.RESUME,
    TaskState.QUEUED: None,
}


class Continuations(DoorBase):
    async def continue_later(self, task_id: str, attempt_id: str, asked: Continuation) -> Changed:
        """The lease holder's "continue at ... / in the next window": the attempt ends
        cleanly (no step may be running), the task goes to ``queued`` held by the
        continuation. Asked again by the same attempt after it ended for this (a retried
        call): nothing changes, the task as it is."""

        async def change(work: Work) -> None:
            if work.task.state is not TaskState.RUNNING:
                why = f"the task is {work.task.state}: only a running attempt continues later"
                raise task_error(Refused(Refusal.TASK_NOT_RUNNING, why), task_id)
            running = [s for s in await self._steps(work) if s.state is StepState.RUNNING]
            if running:
                why = f"step {running[0].step_id} is running: finish or block it first"
                raise step_error(Refused(Refusal.OPEN_STEP, why), task_id, running[0].step_id)
            due = first_due(asked, work.now)
            said = waiting_text(asked, due)
            self._move(work, C.ATTEMPT_ENDED_RESUMABLE, f"continues later: {said}")
            attempt = await self._attempt(work, attempt_id)
            why = f"continues later: {asked.reason or said}"
            await self._end_attempt(work, attempt, AttemptOutcome.CONTINUES_LATER, why)
            await self._hold(work, asked, due, said)

        try:
            return await self._act(task_id, attempt_actor(attempt_id), change, holder=attempt_id)
        except LongTaskLeaseNotHeld:
            task = await self._sql.get_task(task_id)
            if task is not None and await self._ended_for_this(task_id, attempt_id):
                return Changed(task)
            raise

    async def schedule_continuation(
        self, task_id: str, expected_version: int, actor: Actor, asked: Continuation
    ) -> Changed:
        """A person's continuation of a task with no live attempt: planned (queued now),
        paused (resumed now) or queued; it replaces any earlier continuation."""

        async def change(work: Work) -> None:
            state = work.task.state
            if state not in _PERSON_MOVES:
                why = f"the task is {state}: schedule a continuation when no attempt is live"
                raise task_error(Refused(Refusal.INVALID_TASK_TRANSITION, why), task_id)
            due = first_due(asked, work.now)
            said = waiting_text(asked, due)
            command = _PERSON_MOVES[state]
            if command is not None:
                self._move(work, command, f"continuation by {actor.id}: {said}")
            else:
                work.task = replace(work.task, state_reason=said)
                work.note("continuation_scheduled", f"continuation by {actor.id}: {said}")
            await self._hold(work, asked, due, said)

        return await self._act(task_id, actor, change, expected_version=expected_version)

    async def fire_continuation(self, task_id: str) -> Firing | None:
        """The watcher's firing of a due continuation: released (the scheduler starts one
        attempt), missed and waiting for its next window or a person, or dropped as stale.
        None: nothing to do (not due, fired already: a duplicate)."""
        fired: list[Firing] = []

        async def change(work: Work) -> None:
            c = await self._sql.continuation(work.tx, task_id)
            if c is None or c.fired_at_ms is not None or c.due_ms is None or c.due_ms > work.now:
                return
            task = work.task
            if not c.holds(task.state_version) or task.state is not TaskState.QUEUED:
                why = (
                    f"continuation dropped: scheduled at version {c.expected_version}, the task "
                    f"has moved on (version {task.state_version}, {task.state})"
                )
                await self._sql.put_continuation(
                    work.tx, replace(c, fired_at_ms=work.now, note=why)
                )
                work.note("continuation_dropped", why)
                return
            firing = plan_firing(c, work.now)
            if firing is None:
                return
            fired.append(firing)
            total = c.missed_total + firing.missed
            work.task = replace(work.task, state_reason=firing.text[:1024])
            if firing.release:
                kept = replace(c, fired_at_ms=work.now, note=firing.text, missed_total=total)
                work.note("continuation_fired", firing.text[:1024])
            else:  # the task waits on: the continuation holds the version this change makes
                kept = replace(
                    c,
                    due_ms=firing.next_due_ms,
                    note=firing.text,
                    missed_total=total,
                    expected_version=task.state_version + 1,
                )
                work.note("continuation_missed", firing.text[:1024])
            await self._sql.put_continuation(work.tx, kept)

        await self._act(task_id, SYSTEM, change)
        return fired[0] if fired else None

    async def due_continuations(self, limit: int) -> list[str]:
        """The tasks whose continuation is due by the door's clock, oldest due first (a
        read: firing each is ``fire_continuation``'s transaction)."""
        due = await self._sql.due_continuations(self._clock(), limit)
        return [c.task_id for c in due]

    async def _hold(self, work: Work, asked: Continuation, due: int | None, said: str) -> None:
        """Write the continuation holding the task at the version this change makes."""
        held = replace(
            asked,
            task_id=work.task.id,
            expected_version=work.before.state_version + 1,
            due_ms=due,
            missed_total=0,
            note="",
            requested_by=work.actor.id,
            created_at_ms=work.now,
            fired_at_ms=None,
        )
        await self._sql.put_continuation(work.tx, held)
        work.task = replace(work.task, state_reason=said[:1024])

    async def _ended_for_this(self, task_id: str, attempt_id: str) -> bool:
        attempts = await self._sql.attempts(None, task_id)
        mine = next((a for a in attempts if a.id == attempt_id), None)
        return mine is not None and mine.outcome is AttemptOutcome.CONTINUES_LATER
