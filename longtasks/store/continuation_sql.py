"""The statements of continuations (docs/long-tasks.md "Continuations and catch-up"), mixed
into ``LongTaskSql`` (``sql.py``), whose one SQL text per statement, ``?`` placeholders and
transaction rules they share. ``put_continuation`` runs only in a transaction the door
opened, beside the task's change it belongs to; the reads serve the watcher (what is due)
and the read model (a task's continuation)."""

from __future__ import annotations

from typing import Any

from coordinator.store.base import RunTxReader as Tx
from longtasks.domain.continuations import Continuation, ContinuationKind

CONTINUATION = (
    *("task_id", "kind", "expected_version", "due_ms", "time_zone", "cron", "every_ms"),
    *("catchup_window_ms", "missed_total", "note", "reason", "requested_by", "created_at_ms"),
    "fired_at_ms",
)
_MUTABLE = CONTINUATION[1:]

#: One per task: a new continuation replaces the last one, whatever it was.
_PUT = (
    f"INSERT INTO long_task_continuations ({', '.join(CONTINUATION)}) "
    f"VALUES ({', '.join('?' for _ in CONTINUATION)}) ON CONFLICT (task_id) DO UPDATE SET "
    f"{', '.join(f'{c} = excluded.{c}' for c in _MUTABLE)}"
)
_ONE = f"SELECT {', '.join(CONTINUATION)} FROM long_task_continuations WHERE task_id = ?"
#: Not fired and due, oldest first (stale ones too: firing drops them).
_DUE = (
    f"SELECT {', '.join(CONTINUATION)} FROM long_task_continuations "
    "WHERE fired_at_ms IS NULL AND due_ms IS NOT NULL AND due_ms <= ? "
    "ORDER BY due_ms, task_id LIMIT ?"
)
#: The condition that keeps a queued task from the scheduler and out of its owner's queue
#: count: a continuation not fired, scheduled at the task's current version.
CONTINUATION_HOLDS = (
    "EXISTS (SELECT 1 FROM long_task_continuations c WHERE c.task_id = long_tasks.id "
    "AND c.fired_at_ms IS NULL AND c.expected_version = long_tasks.state_version)"
)


def continuation_from_row(row: Any) -> Continuation:
    return Continuation(
        task_id=row["task_id"],
        kind=ContinuationKind(row["kind"]),
        expected_version=int(row["expected_version"]),
        due_ms=_int(row["due_ms"]),
        time_zone=row["time_zone"],
        cron=row["cron"],
        every_ms=_int(row["every_ms"]),
        catchup_window_ms=int(row["catchup_window_ms"]),
        missed_total=int(row["missed_total"]),
        note=row["note"],
        reason=row["reason"],
        requested_by=row["requested_by"],
        created_at_ms=int(row["created_at_ms"]),
        fired_at_ms=_int(row["fired_at_ms"]),
    )


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


class ContinuationStatements:
    """Mixed into ``LongTaskSql``, which provides the two primitives below."""

    async def _fetch(self, tx: Tx | None, sql: str, *args: Any) -> list[Any]:
        raise NotImplementedError

    async def put_continuation(self, tx: Tx, c: Continuation) -> None:
        values = (
            *(c.task_id, c.kind.value, c.expected_version, c.due_ms, c.time_zone, c.cron),
            *(c.every_ms, c.catchup_window_ms, c.missed_total, c.note[:1024], c.reason[:1024]),
            *(c.requested_by[:256], c.created_at_ms, c.fired_at_ms),
        )
        await self._fetch(tx, _PUT, *values)

    async def continuation(self, tx: Tx | None, task_id: str) -> Continuation | None:
        rows = await self._fetch(tx, _ONE, task_id)
        return continuation_from_row(rows[0]) if rows else None

    async def due_continuations(self, now_ms: int, limit: int) -> list[Continuation]:
        return [continuation_from_row(row) for row in await self._fetch(None, _DUE, now_ms, limit)]
