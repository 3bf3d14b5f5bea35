"""Schedule-event retention: events older than the retention period are deleted, a batch per
transaction, each schedule's newest kept so its numbering goes on. Fires are recorded for
people; the runs they created stay whatever happens to these notes."""

from __future__ import annotations

import logging
from collections.abc import Callable

from automations.store.sql import ScheduleSql
from coordinator.service.transitions import Transitions
from kernel.ids import now_ms
from kernel.loops import every

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000


class EventRetention:
    def __init__(
        self,
        transitions: Transitions,
        sql: ScheduleSql,
        retention_days: int,
        interval_s: float = 600.0,
        batch: int = 5000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._transitions = transitions
        self._sql = sql
        self._retention_days = retention_days
        self._interval_s = interval_s
        self._batch = batch
        self._clock = clock

    async def run_once(self) -> int:
        """Delete what expired; how many events were deleted."""
        if self._retention_days <= 0:
            return 0
        cutoff = self._clock() - self._retention_days * DAY_MS
        deleted = 0
        while True:
            async with self._transitions.transaction([]) as tx:
                count = await self._sql.delete_events_before(tx, cutoff, self._batch)
            deleted += count
            if count < self._batch:
                break
        if deleted:
            log.info("schedule event retention: deleted %d events", deleted)
        return deleted

    async def serve(self) -> None:
        await every(self._interval_s, self.run_once, "schedule event retention")
