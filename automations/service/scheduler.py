"""The scheduler: any number of replicas, no leader. Each round claims one due schedule at a
time (FOR UPDATE SKIP LOCKED on PostgreSQL, SQLite's single writer), plans it
(automations/domain/plan.py) and carries the plan out in the same transaction
(automations/service/fires.py). A replica killed between the claim and the commit leaves
nothing: its transaction rolls back, the row unlocks, and the next replica's round finds
the same fire still due and creates its one run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from automations.domain.model import Note, Schedule
from automations.domain.plan import plan_round
from automations.service.fires import carry_out, open_runs
from automations.store.sql import ScheduleChanged, ScheduleSql
from coordinator.service.transitions import Transitions
from kernel.errors import IdempotencyKeyConflict, VersionConflict
from kernel.ids import now_ms
from kernel.loops import failed

log = logging.getLogger(__name__)

#: A schedule whose round fails unexpectedly waits this long before it is tried again, so
#: one bad row never starves the others.
ERROR_BACKOFF_MS = 60_000
#: How long the loop sleeps at most between rounds (a schedule created by another process
#: is seen this soon), and at least (a busy database is not hammered).
MAX_IDLE_S = 1.0
MIN_IDLE_S = 0.01
_RETRIES = 3


class Scheduler:
    def __init__(
        self,
        transitions: Transitions,
        sql: ScheduleSql,
        name: str = "scheduler",
        clock: Callable[[], int] = now_ms,
        on_note: Callable[[Note], None] | None = None,
    ) -> None:
        self._transitions = transitions
        self._sql = sql
        self._name = name
        self._clock = clock
        self._on_note = on_note

    async def round(self, limit: int = 1_000) -> int:
        """Every due schedule once (up to ``limit``); how many were handled."""
        handled = 0
        while handled < limit and await self.one():
            handled += 1
        return handled

    async def one(self) -> bool:
        """Claim, plan and carry out one due schedule; False when none is due."""
        for _ in range(_RETRIES):
            now = self._clock()
            claimed: Schedule | None = None
            try:
                async with self._transitions.transaction([]) as tx:
                    claimed = await self._sql.claim_due(tx, now)
                    if claimed is None:
                        return False
                    still_open = await open_runs(tx, claimed)
                    plan = plan_round(claimed, now, still_open)
                    carried = await carry_out(
                        self._transitions,
                        self._sql,
                        tx,
                        claimed,
                        still_open,
                        plan,
                        ("scheduler", self._name),
                        now,
                    )
            except (ScheduleChanged, IdempotencyKeyConflict, VersionConflict):
                continue  # another writer moved first; plan again on what it committed
            except Exception as exc:  # a bug or bad row: park it, keep the others going
                if claimed is None:
                    raise
                log.exception("schedule %s failed", claimed.schedule_id)
                await self._park(claimed, exc)
                return True
            self._transitions.published(carried.results)
            if self._on_note is not None:
                for note in carried.notes:
                    self._on_note(note)
            return True
        return True

    async def _park(self, schedule: Schedule, exc: Exception) -> None:
        now = self._clock()
        try:
            async with self._transitions.transaction([]) as tx:
                current = await self._sql.get(
                    tx, schedule.project_id, schedule.schedule_id, lock=True
                )
                if current is None or current.version != schedule.version:
                    return
                parked = replace(
                    current,
                    version=current.version + 1,
                    wake_ms=now + ERROR_BACKOFF_MS,
                    updated_at_ms=now,
                )
                await self._sql.update(tx, parked, current.version)
                note = Note("error", f"the scheduler failed on this schedule: {exc!r:.300}")
                await self._sql.append(tx, parked, [note], ("scheduler", self._name), now)
        except Exception:
            # Not even parked: end the round (the loop pauses MAX_IDLE_S after a failed
            # round) rather than claim the same failing schedule again at once.
            log.exception("could not park schedule %s", schedule.schedule_id)
            raise

    async def serve(self) -> None:
        """Rounds until cancelled, sleeping until the next wake (at most MAX_IDLE_S)."""
        while True:
            try:
                await self.round()
                wake = await self._sql.next_wake()
            except Exception:  # a database hiccup: next round, never die
                log.exception("scheduler round failed")
                failed("scheduler round")
                wake = None
            delay = MAX_IDLE_S if wake is None else (wake - self._clock()) / 1000
            await asyncio.sleep(min(MAX_IDLE_S, max(MIN_IDLE_S, delay)))
