"""The long-task watcher and scheduler (docs/long-tasks.md "The watcher"): one loop, run by
every reconciler replica and by `truerun dev`, with no leader. Each round

1. ends the attempts whose run has ended (``liveness.RUN_ENDED``: terminal, lost, dead
   letter; never a run shown ``unknown``, whose process may still be working) through
   ``LongTaskDoor.attempt_ended``, with the run's status and reasons in words;
2. fires the due continuations through ``LongTaskDoor.fire_continuation`` (docs/long-tasks.md
   "Continuations and catch-up"): the ones missed while truerun was not running coalesce
   into one release of the task, or are reported while it waits for its next window;
3. starts queued tasks through ``LongTaskDoor.start_attempt``, oldest first per owner,
   while the owner has a free concurrency slot (``queue.starts_this_round``); a task held
   by its continuation is not in the queue.

Its first round also settles what died while no watcher ran (``held_by_the_dead``), naming
as dead only attempts it saw with an ended run: an attempt started since by another replica
is alive.

It reads the long-task tables and the runs; it writes nothing itself. Every decision is one
transaction of the door, which locks the task row and compares versions: two replicas
racing on one task make one change and one conflict (or one no-op), and a conflict only
means another replica did it. The concurrency cap is checked inside ``start_attempt``'s
transaction under the owner's lock (``admit``), so racing replicas never start more than
the cap between them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service.transitions import DoorTx, Result
from kernel.errors import (
    IdempotencyKeyConflict,
    InvalidLongTaskTransition,
    LongTaskNotFound,
    LongTaskVersionConflict,
    VersionConflict,
)
from kernel.loops import failed
from longtasks.domain.liveness import run_ended
from longtasks.domain.model import Task
from longtasks.domain.queue import free_slots, starts_this_round
from longtasks.service.door import LongTaskDoor
from longtasks.store.watcher_sql import WatcherSql

log = logging.getLogger(__name__)

#: How long the loop sleeps at most between rounds (a wake from this process's commits
#: cuts it short), and at least (a busy database is not hammered).
MAX_IDLE_S = 1.0
MIN_IDLE_S = 0.01
#: How many queued tasks one round looks at (every owner's, oldest first).
QUEUED_PER_ROUND = 1_000
#: How many due continuations one round fires (the rest: next round).
CONTINUATIONS_PER_ROUND = 500
#: How many queued tasks of an owner past its free slots one round looks at: room for the
#: ones it skips because their last attempt is still open.
SKIP_ROOM = 16
#: The per-owner concurrency cap's default (TRUERUN_LONG_TASK_OWNER_CONCURRENCY).
OWNER_CONCURRENCY = 4
#: Skipped and conflicting starts, each a normal outcome with several replicas.
_LOST_RACES = (LongTaskVersionConflict, IdempotencyKeyConflict, VersionConflict)


class OwnerAtCapacity(Exception):
    """Raised inside ``start_attempt``'s transaction: the owner's slots are all taken (as
    the transaction sees them, under the owner's lock); nothing is written."""


@dataclass(frozen=True, slots=True)
class Round:
    """What one round did: attempts ended by this watcher (by run status), tasks started,
    tasks moved to ``partial`` by a used-up budget, tasks settled at process start."""

    ended: dict[str, int]
    started: list[str]
    exhausted: list[str]
    settled_at_start: list[str]
    continued: list[str] = field(default_factory=list)  # tasks a continuation released


def owner_lock(owner_id: str) -> str:
    """The advisory lock serializing one owner's starts (PostgreSQL; SQLite's single writer
    already serializes them)."""
    return f"long_task_owner:{owner_id}"


class LongTaskWatcher:
    def __init__(
        self,
        door: LongTaskDoor,
        sql: WatcherSql,
        name: str = "long-tasks",
        owner_concurrency: int = OWNER_CONCURRENCY,
        on_action: Callable[[str, str], None] | None = None,
        queued_per_round: int = QUEUED_PER_ROUND,
    ) -> None:
        """``on_action(action, label)``: ``("ended", run status)``, ``("started", "")``,
        ``("budget_exhausted", "")``, ``("settled_at_start", "")``, ``("continuation",
        "released" | "missed")`` (metrics)."""
        self._door = door
        self._sql = sql
        self._name = name
        self._cap = owner_concurrency
        self._on_action = on_action
        self._per_round = queued_per_round
        self._scheduler = Actor(ActorType.SCHEDULER, f"long-task-scheduler:{name}")
        self._watcher = Actor(ActorType.RECONCILER, f"long-task-watcher:{name}")
        self._started = False
        self._wake = asyncio.Event()

    async def run_once(self) -> Round:
        """One round: the attempts whose run ended, the process-start pass (until it has
        succeeded once), then the queued tasks."""
        ended = await self._end_attempts()
        settled = [] if self._started else await self._settle_the_dead()
        continued = await self._fire_continuations()
        started, exhausted = await self._start_queued()
        return Round(ended, started, exhausted, settled, continued)

    async def _fire_continuations(self) -> list[str]:
        """Each due continuation in its own door transaction: two replicas firing one make
        one change and one no-op (the second finds it fired, or the version moved on)."""
        released: list[str] = []
        for task_id in await self._door.due_continuations(CONTINUATIONS_PER_ROUND):
            try:
                firing = await self._door.fire_continuation(task_id)
            except (*_LOST_RACES, LongTaskNotFound):
                continue
            except Exception:  # one bad task never starves the others
                log.exception("firing the continuation of long task %s failed", task_id)
                self._note("error", "fire_continuation")
                continue
            if firing is None:
                continue
            if firing.release:
                released.append(task_id)
            self._note("continuation", "released" if firing.release else "missed")
        return released

    # -- 1. attempts whose run ended ----------------------------------------------------

    async def _end_attempts(self) -> dict[str, int]:
        ended: dict[str, int] = {}
        for open_attempt in await self._sql.open_attempt_runs():
            if not open_attempt.run_ended:
                continue  # running, queued, or unknown: the attempt stays open
            try:
                changed = await self._door.attempt_ended(
                    open_attempt.task_id,
                    open_attempt.attempt_id,
                    open_attempt.ended_reason(),
                    self._watcher,
                )
            except (*_LOST_RACES, LongTaskNotFound):
                continue  # another replica, or a person, moved first: next round reads again
            except Exception:  # one bad task never starves the others
                log.exception("ending long-task attempt %s failed", open_attempt.attempt_id)
                self._note("error", "attempt_ended")
                continue
            if changed.notes:  # this call ended it (a repeat notes nothing)
                status = open_attempt.run_status
                ended[status] = ended.get(status, 0) + 1
                self._note("ended", status)
        return ended

    # -- 2. process start -----------------------------------------------------------------

    async def _settle_the_dead(self) -> list[str]:
        """The attempts whose run ended while no watcher ran are ended just before, each
        with its run's reasons; this settles the rest (a running step whose holder's
        record has ended, a run that ended since). Live: every attempt seen with a run not
        ended; an attempt not seen (started since by another replica) is alive too."""
        snapshot = await self._sql.open_attempt_runs()
        live = {a.attempt_id for a in snapshot if not a.run_ended}
        seen = {a.attempt_id for a in snapshot}
        why = f"its holder was not alive when the long-task watcher {self._name} started"
        try:
            changed = await self._door.held_by_the_dead(live, why, self._watcher, seen=seen)
        except Exception:  # tried again next round; the queue does not wait for it
            log.exception("settling the long tasks held by the dead failed")
            self._note("error", "held_by_the_dead")
            return []
        self._started = True
        for _ in changed:
            self._note("settled_at_start", "")
        return [c.task.id for c in changed]

    # -- 3. queued tasks --------------------------------------------------------------------

    async def _start_queued(self) -> tuple[list[str], list[str]]:
        started: list[str] = []
        exhausted: list[str] = []
        # The front of each owner's queue: its free slots, and room for tasks it has to
        # skip (their last attempt still open) without waiting for the next round.
        per_owner = self._cap + SKIP_ROOM
        queued = await self._sql.queued_tasks(self._cap, per_owner, self._per_round)
        taken = await self._sql.slots_taken()
        for owner_queue in starts_this_round(queued, taken, self._cap):
            free = free_slots(taken.get(owner_queue[0].owner_id, 0), self._cap)
            for task in owner_queue:
                if free <= 0:
                    break
                try:
                    changed = await self._door.start_attempt(
                        task.id, self._scheduler, task.state_version, admit=self.admit
                    )
                except OwnerAtCapacity:
                    break  # another replica filled the owner's slots: its next round
                except (*_LOST_RACES, LongTaskNotFound):
                    continue  # started or moved by someone else since it was read
                except InvalidLongTaskTransition as refused:
                    # ATTEMPT_OPEN: its last attempt's run has not ended yet; it keeps its
                    # place and the next task of the owner takes the turn this round
                    log.debug("long task %s not started: %s", task.id, refused.message)
                    continue
                except Exception:
                    log.exception("starting long task %s failed", task.id)
                    self._note("error", "start_attempt")
                    continue
                if changed.made is None:  # the budget was used up: partial, no attempt
                    exhausted.append(task.id)
                    self._note("budget_exhausted", "")
                    continue
                free -= 1
                started.append(task.id)
                self._note("started", "")
        return started, exhausted

    async def admit(self, tx: DoorTx, task: Task) -> None:
        """Inside ``start_attempt``'s transaction: take the owner's lock, then count its
        slots as committed now; a full owner refuses (nothing is written)."""
        await tx.lock([owner_lock(task.owner_id)])
        taken = await self._sql.slots_of_owner(tx, task.owner_id)
        if taken >= self._cap:
            raise OwnerAtCapacity(
                f"owner {task.owner_id} has {taken} of {self._cap} long tasks active"
            )

    # -- the loop -----------------------------------------------------------------------

    def wake(self, result: Result | None = None) -> None:
        """Run the next round now (a hub listener: a long-task run ended in this process)."""
        if result is None or (
            result.run.trigger_type == "long_task" and run_ended(result.run.status.value)
        ):
            self._wake.set()

    async def serve(self) -> None:
        """Rounds until cancelled; a failed round is logged and the next one tries again."""
        while True:
            self._wake.clear()  # before the round: a wake during it means one more
            try:
                await self.run_once()
            except Exception:  # a database hiccup: next round, never die
                log.exception("long-task watcher round failed")
                failed("long-task watcher round")
            try:
                await asyncio.wait_for(self._wake.wait(), MAX_IDLE_S)
            except TimeoutError:
                pass
            await asyncio.sleep(MIN_IDLE_S)

    def _note(self, action: str, label: str) -> None:
        if self._on_action is not None:
            self._on_action(action, label)
