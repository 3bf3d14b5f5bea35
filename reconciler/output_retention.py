"""Output retention: the stored output of attempts that ended longer ago than the retention
period is deleted, a batch at a time (readers then answer ``expired``). Output is not state:
no transition is involved, and the attempt rows keep their byte counts; the delete still goes
through the one write door (``Transitions.delete_output``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.service.transitions import Transitions
from kernel.ids import now_ms
from kernel.loops import every

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000


class OutputRetention:
    def __init__(
        self,
        transitions: Transitions,
        retention_days: int,
        interval_s: float = 600.0,
        batch: int = 5000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._transitions = transitions
        self._retention_days = retention_days
        self._interval_s = interval_s
        self._batch = batch
        self._clock = clock

    async def run_once(self) -> int:
        """Delete what expired; how many stored pieces were deleted."""
        if self._retention_days <= 0:
            return 0
        cutoff = self._clock() - self._retention_days * DAY_MS
        deleted = 0
        while (count := await self._transitions.delete_output(cutoff, self._batch)) > 0:
            deleted += count
        if deleted:
            log.info("output retention: deleted %d stored pieces", deleted)
        return deleted

    async def serve(self) -> None:
        await every(self._interval_s, self.run_once, "output retention")
