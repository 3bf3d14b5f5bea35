"""What the door committed, handed to listeners after the commit (the release metrics,
services/metrics.py): the task before and after, the events noted, the decision asked or
answered. A listener is called only once the transaction has committed, never for a
change that was refused or rolled back, and never for a call that noted no event."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.domain.model import Actor
from longtasks.domain.actions import ActionRecord
from longtasks.domain.model import Decision, Event, Task
from longtasks.domain.rules import TaskCommand
from longtasks.domain.states import DecisionKind, DecisionState, TaskState
from longtasks.service.base import Change, DoorBase, Work
from longtasks.service.inputs import Changed

log = logging.getLogger(__name__)
#: How many of a task's latest events are read to find when it entered the queue.
_QUEUED_LOOKBACK = 50


@dataclass(frozen=True, slots=True)
class Committed:
    """One committed change of one task."""

    before: Task
    after: Task
    events: tuple[Event, ...]
    decision: Decision | None
    at_ms: int
    queued_at_ms: int | None = None  # an attempt's start: when the task entered the queue


Listener = Callable[[Committed], None]


class Observed(DoorBase):
    """The door's ``_act`` with its committed changes told to the listeners."""

    _listeners: tuple[Listener, ...] = ()

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` after every committed change (it must not block; what it raises
        is logged, the caller still gets its answer)."""
        self._listeners = (*self._listeners, listener)

    async def _queued_at(self, before: Task, after: Task) -> int | None:
        """When a task whose attempt just started entered the queue: the last event of its
        log moving it into ``queued`` from elsewhere (a plan revision while it waited stays
        in ``queued`` and does not count). Read after the commit: the log is append-only."""
        if before.state is not TaskState.QUEUED or after.state is not TaskState.RUNNING:
            return None
        first = max(0, before.event_sequence - _QUEUED_LOOKBACK)
        try:
            events = await self._sql.events(before.id, after=first, limit=_QUEUED_LOOKBACK)
        except Exception:  # the start is committed: a failed read costs the metric only
            log.exception("reading task %s's queue entry failed", before.id)
            return before.updated_at_ms
        for event in reversed(events):
            if event.to_state == TaskState.QUEUED and event.from_state != TaskState.QUEUED:
                return event.created_at_ms
        return before.updated_at_ms  # queued longer ago than the events read: a lower bound

    async def _act(
        self,
        task_id: str,
        actor: Actor,
        change: Change,
        *,
        expected_version: int | None = None,
        holder: str | None = None,
        action: ActionRecord | None = None,
    ) -> Changed:
        seen: list[Work] = []

        async def watched(work: Work) -> None:
            seen.append(work)
            await change(work)

        changed = await super()._act(
            task_id, actor, watched, expected_version=expected_version, holder=holder, action=action
        )
        if seen and seen[-1].events and self._listeners:
            work = seen[-1]
            committed = Committed(
                work.before,
                changed.task,
                tuple(work.events),
                changed.decision,
                work.now,
                await self._queued_at(work.before, changed.task),
            )
            for listener in self._listeners:
                try:
                    listener(committed)
                except Exception:  # the change is committed: a listener never undoes it
                    log.exception("a long-task listener failed on task %s", task_id)
        return changed


#: How an attempt's end was settled by recovery (``truerun_long_task_recovery_total{outcome}``).
RECOVERY_OUTCOMES = {
    TaskCommand.ATTEMPT_ENDED_RESUMABLE.value: "resumed",
    TaskCommand.ATTEMPT_ENDED_ASK_USER.value: "asked_person",
    TaskCommand.ATTEMPT_ENDED_NEEDS_REVIEW.value: "recovery_required",
}


def terminal_outcome(c: Committed) -> str | None:
    """The terminal state the change reached (None: it reached none)."""
    if c.after.state.terminal and not c.before.state.terminal:
        return c.after.state.value
    return None


def recovery_outcome(c: Committed) -> str | None:
    """How recovery settled an ended attempt: resumed by itself, a person asked, or a check
    required (None: no attempt ended into recovery here)."""
    for event in c.events:
        if event.type in RECOVERY_OUTCOMES:
            return RECOVERY_OUTCOMES[event.type]
    return None


def answered_kind(c: Committed) -> str | None:
    """The kind of the decision a person answered in this change (None: none was)."""
    d = c.decision
    if d is not None and d.state is DecisionState.ANSWERED and d.answered_at_ms == c.at_ms:
        return d.kind.value
    return None


def repeated_approval(c: Committed) -> bool:
    """An approval asked in this change for an action this task asked for before."""
    d = c.decision
    return (
        d is not None
        and d.kind is DecisionKind.APPROVAL
        and d.state is DecisionState.OPEN
        and d.created_at_ms == c.at_ms
        and d.repeat_count > 1
    )


def queue_wait_ms(c: Committed) -> int | None:
    """How long the task waited queued before this change started its attempt."""
    if c.queued_at_ms is None:
        return None
    return max(0, c.at_ms - c.queued_at_ms)


def false_completion(c: Committed) -> str | None:
    """Who found a completed task not complete in this change: ``person`` (a person
    continued a ``completed`` task, the only way out of it), ``verifier`` (on the continued
    plan the verifier failed a criterion whose pass the completion stood on:
    ``completion_disputed``), None: neither."""
    if c.before.state is TaskState.COMPLETED and c.after.state is not TaskState.COMPLETED:
        return "person"
    if any(event.type == "completion_disputed" for event in c.events):
        return "verifier"
    return None


def duplicate_effects(c: Committed) -> int:
    """Receipts recorded in this change for an intent that already had one (``domain/
    findings.py``): an effect that happened twice."""
    return sum(1 for event in c.events if event.type == "duplicate_effect")
