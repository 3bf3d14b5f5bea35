"""Retention keyed on task terminality, and the start-up check of references (docs/long-tasks.md
"Retention and export"; seed C "Implementation Decisions"):

- ``LongTaskRetention``: a task finished (completed, partial, failed, cancelled) longer ago
  than TRUERUN_LONG_TASK_RETENTION_DAYS is trimmed (``Upkeep.trim``): its compact summary
  and acceptance outcome stay. An unfinished task is never trimmed, whatever its age: a
  failed attempt's evidence stays readable by the next attempt. The scan is
  ``kernel/retention.py``'s (a batch at a time, every ``interval_s``), run by the reconciler
  and by ``truerun dev``.
- ``BrokenReferences``: at start, every reference of an unfinished task whose target is gone
  (a run's output that output retention deleted, a receipt or a decision that is not there)
  is marked unavailable, so the next attempt meets a known state, not a surprise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kernel.ids import now_ms
from kernel.retention import Retention
from longtasks.service.evidence_sources import EvidenceSources
from longtasks.service.upkeep import Upkeep
from longtasks.store.upkeep_sql import UpkeepSql

log = logging.getLogger(__name__)


class LongTaskRetention(Retention):
    def __init__(
        self,
        upkeep: Upkeep,
        sql: UpkeepSql,
        retention_days: int,
        interval_s: float = 600.0,
        batch: int = 100,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._upkeep = upkeep
        self._sql = sql
        self._days = retention_days
        super().__init__(
            "long-task retention", self._trim_batch, retention_days, interval_s, batch, clock
        )

    async def _trim_batch(self, cutoff_ms: int, limit: int) -> int:
        trimmed = 0
        for task_id in await self._sql.to_trim(cutoff_ms, limit):
            if await self._upkeep.trim(task_id, self._days):
                trimmed += 1
        return trimmed


class BrokenReferences:
    def __init__(self, upkeep: Upkeep, sql: UpkeepSql, sources: EvidenceSources) -> None:
        self._upkeep = upkeep
        self._sql = sql
        self._sources = sources

    async def run_once(self) -> int:
        """Mark the gone targets of unfinished tasks' references: how many were marked."""
        marked = 0
        for evidence in await self._sql.unmarked_of_unfinished():
            why = await self._sources.gone(evidence)
            if why is not None and await self._upkeep.mark_unavailable(
                evidence.task_id, evidence.id, why
            ):
                marked += 1
        if marked:
            log.info("long-task evidence: %d references marked unavailable", marked)
        return marked
