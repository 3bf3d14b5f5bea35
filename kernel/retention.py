"""The shape every retention scan shares: past a number of days, delete a batch at a time
until a batch comes back short, then wait for the next round (kernel/loops.every). What is
deleted, and through which door, is the caller's ``delete_batch(cutoff_ms, limit)``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from kernel.ids import now_ms
from kernel.loops import every

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000


class Retention:
    def __init__(
        self,
        what: str,
        delete_batch: Callable[[int, int], Awaitable[int]],
        retention_days: int,
        interval_s: float = 600.0,
        batch: int = 5000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._what = what
        self._delete_batch = delete_batch
        self._retention_days = retention_days
        self._interval_s = interval_s
        self._batch = batch
        self._clock = clock

    async def run_once(self) -> int:
        """Delete what expired (0 days = keep forever); how many rows were deleted."""
        if self._retention_days <= 0:
            return 0
        cutoff = self._clock() - self._retention_days * DAY_MS
        deleted = 0
        while True:
            count = await self._delete_batch(cutoff, self._batch)
            deleted += count
            if count < self._batch:
                break
        if deleted:
            log.info("%s: deleted %d", self._what, deleted)
        return deleted

    async def serve(self) -> None:
        await every(self._interval_s, self.run_once, self._what)
