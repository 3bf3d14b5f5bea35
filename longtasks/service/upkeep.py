"""The long-task door's upkeep writes (docs/long-tasks.md "Reading evidence", "Retention and
export"), each one transaction opened through the coordinator's door like every other:

- ``charge_read``: the evidence reader's per-attempt counter, moved on compare-and-set (no
  state change: no version, no event, as ``renew_lease``);
- ``mark_unavailable``: a reference whose target is gone, marked (an ``evidence_unavailable``
  event; the step it proves is not touched);
- ``trim``: retention of a task finished longer ago than the retention period: its bulky
  records trimmed, a compact summary and the acceptance outcome kept (a
  ``retention_trimmed`` event).
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.service.transitions import Transitions
from kernel.errors import LongTaskNotFound
from kernel.ids import now_ms
from longtasks.service.base import SYSTEM, DoorBase, Work
from longtasks.store.sql import Stale
from longtasks.store.upkeep_sql import UpkeepSql

#: What a trimmed task's references say when read.
TRIMMED = "evidence unavailable (expired/cleaned): retention trimmed the finished task"


class Upkeep(DoorBase):
    def __init__(
        self, transitions: Transitions, sql: UpkeepSql, clock: Callable[[], int] = now_ms
    ) -> None:
        super().__init__(transitions, sql, clock=clock)
        self._upkeep = sql

    async def bytes_read(self, task_id: str, attempt_id: str) -> int:
        used = await self._upkeep.bytes_read(None, task_id, attempt_id)
        if used is None:
            raise LongTaskNotFound(f"long task {task_id} has no attempt {attempt_id}")
        return used

    async def charge_read(self, task_id: str, attempt_id: str, wanted: int, limit: int) -> int:
        """Count up to ``wanted`` more bytes read by the attempt, never past ``limit``:
        how many were counted (the reader serves only those)."""
        for _ in range(5):  # a concurrent read of the same attempt moved the counter: again
            async with self._transitions.transaction([]) as tx:
                used = await self._upkeep.bytes_read(tx, task_id, attempt_id)
                if used is None:
                    raise LongTaskNotFound(f"long task {task_id} has no attempt {attempt_id}")
                granted = max(0, min(wanted, limit - used))
                if granted == 0:
                    return 0
                try:
                    await self._upkeep.add_bytes_read(tx, task_id, attempt_id, used, granted)
                except Stale:
                    continue
                return granted
        return 0

    async def mark_unavailable(self, task_id: str, evidence_id: str, why: str) -> bool:
        """Mark one reference's target gone (False: it was marked already)."""
        marked: list[bool] = []

        async def change(work: Work) -> None:
            done = await self._upkeep.mark_unavailable(work.tx, task_id, evidence_id, why)
            marked.append(done)
            if done:
                work.note("evidence_unavailable", f"evidence {evidence_id}: {why}"[:1024])

        await self._act(task_id, SYSTEM, change)
        return bool(marked and marked[0])

    async def trim(self, task_id: str, retention_days: int) -> bool:
        """Trim one finished task (False: not finished, or trimmed since it last
        finished; a task continued after a trim and finished again is trimmed again)."""
        trimmed: list[bool] = []

        async def change(work: Work) -> None:
            if not work.task.state.terminal:
                return
            trimmed_at = await self._upkeep.trimmed_at(work.tx, task_id)
            finished = work.task.finished_at_ms or 0
            if trimmed_at is not None and trimmed_at >= finished:
                return  # trimmed since it last finished
            counts = await self._upkeep.trim(work.tx, task_id, work.now, TRIMMED)
            trimmed.append(True)
            events, evidence, effects, decisions, notices = counts
            work.note(
                "retention_trimmed",
                f"finished more than {retention_days} days ago: kept the state changes, "
                f"criteria results and summaries; trimmed {events} events, {evidence} evidence "
                f"payloads, {effects} receipt details, {decisions} decision materials, "
                f"{notices} notices with their deliveries",
            )

        await self._act(task_id, SYSTEM, change)
        return bool(trimmed)
