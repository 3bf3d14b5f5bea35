"""Schedule-event retention: events older than the retention period are deleted, a batch per
transaction, each schedule's newest kept so its numbering goes on. Fires are recorded for
people; the runs they created stay whatever happens to these notes."""

from __future__ import annotations

from collections.abc import Callable

from automations.store.sql import ScheduleSql
from coordinator.service.transitions import Transitions
from kernel.ids import now_ms
from kernel.retention import Retention


class EventRetention(Retention):
    def __init__(
        self,
        transitions: Transitions,
        sql: ScheduleSql,
        retention_days: int,
        interval_s: float = 600.0,
        batch: int = 5000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        async def delete_batch(cutoff_ms: int, limit: int) -> int:
            async with transitions.transaction([]) as tx:
                return await sql.delete_events_before(tx, cutoff_ms, limit)

        super().__init__(
            "schedule event retention", delete_batch, retention_days, interval_s, batch, clock
        )
