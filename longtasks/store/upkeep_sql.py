"""The evidence reader's and retention's statements (docs/long-tasks.md "Reading evidence",
"Retention and export"), beside the door's (``sql.py``, whose one SQL text per statement and
``?`` placeholders they share): one evidence row of one task, the per-attempt read counter,
the references a start-up check marks unavailable, and the trimming of a finished task's
bulky records. Every write takes the transaction the long-task door opened."""

from __future__ import annotations

from longtasks.domain.model import Evidence
from longtasks.domain.states import TASK_TERMINAL
from longtasks.store import records as rec
from longtasks.store.sql import Tx, _cols
from longtasks.store.watcher_sql import WatcherSql

_FINISHED = tuple(sorted(s.value for s in TASK_TERMINAL))
_IN_FINISHED = f"({', '.join('?' for _ in _FINISHED)})"

#: One reference, only if it is bound to the task asked about: another task's id reads as
#: missing (the reader answers NOT_FOUND for both).
_ONE_EVIDENCE = f"SELECT {_cols(rec.EVIDENCE)} FROM long_task_evidence WHERE id = ? AND task_id = ?"
_BYTES_READ = "SELECT evidence_bytes_read FROM long_task_attempts WHERE id = ? AND task_id = ?"
_ADD_BYTES = (
    "UPDATE long_task_attempts SET evidence_bytes_read = evidence_bytes_read + ? "
    "WHERE id = ? AND task_id = ? AND evidence_bytes_read = ? RETURNING id"
)
#: The references of unfinished tasks not marked yet, for the start-up check.
_UNMARKED_OF_UNFINISHED = (
    f"SELECT {_cols(tuple('e.' + c for c in rec.EVIDENCE))} FROM long_task_evidence e "
    "JOIN long_tasks t ON t.id = e.task_id "
    f"WHERE e.unavailable_reason IS NULL AND t.state NOT IN {_IN_FINISHED} "
    "ORDER BY e.task_id, e.id"
)
_MARK = (
    "UPDATE long_task_evidence SET unavailable_reason = ? "
    "WHERE id = ? AND task_id = ? AND unavailable_reason IS NULL RETURNING id"
)
#: Not trimmed since it last finished (a continued task that finished again is trimmed again).
_UNTRIMMED = "(trimmed_at_ms IS NULL OR trimmed_at_ms < finished_at_ms)"
#: Finished tasks past the cutoff that retention has not trimmed yet, oldest first.
_TO_TRIM = (
    f"SELECT id FROM long_tasks WHERE state IN {_IN_FINISHED} AND finished_at_ms < ? "
    f"AND {_UNTRIMMED} ORDER BY finished_at_ms, id LIMIT ?"
)
#: The compact summary kept of a trimmed task's log: its state changes.
_TRIM_EVENTS = (
    "DELETE FROM long_task_events WHERE task_id = ? AND to_state IS NULL RETURNING sequence"
)
_TRIM_EVIDENCE = (
    "UPDATE long_task_evidence SET render = '{}', "
    "unavailable_reason = COALESCE(unavailable_reason, ?) WHERE task_id = ? RETURNING id"
)
_TRIM_EFFECTS = (
    "UPDATE long_task_side_effects SET receipt_detail = '{}' WHERE task_id = ? "
    "AND receipt_detail <> '{}' RETURNING id"
)
_TRIM_DECISIONS = (
    "UPDATE long_task_decisions SET material = '{}' WHERE task_id = ? AND material <> '{}' "
    "RETURNING id"
)
#: A trimmed task's notices and their deliveries go (0019): a notice is a message about a
#: change, not the record of it (the state changes stay in the task's log).
_TRIM_DELIVERIES = (
    "DELETE FROM long_task_notice_deliveries WHERE notice_id IN "
    "(SELECT id FROM long_task_notices WHERE task_id = ?) RETURNING id"
)
_TRIM_NOTICES = "DELETE FROM long_task_notices WHERE task_id = ? RETURNING id"
_TRIMMED = (
    f"UPDATE long_tasks SET trimmed_at_ms = ? WHERE id = ? AND {_UNTRIMMED} "
    f"AND state IN {_IN_FINISHED} RETURNING id"
)
_TRIMMED_AT = "SELECT trimmed_at_ms FROM long_tasks WHERE id = ?"


class UpkeepSql(WatcherSql):
    """The door's and the watcher's statements, and the evidence reader's and retention's."""

    async def one_evidence(self, task_id: str, evidence_id: str) -> Evidence | None:
        rows = await self._fetch(None, _ONE_EVIDENCE, evidence_id, task_id)
        return rec.evidence_from_row(rows[0]) if rows else None

    async def bytes_read(self, tx: Tx | None, task_id: str, attempt_id: str) -> int | None:
        """What the reader served the attempt so far (None: no such attempt of the task)."""
        rows = await self._fetch(tx, _BYTES_READ, attempt_id, task_id)
        return int(rows[0]["evidence_bytes_read"]) if rows else None

    async def add_bytes_read(
        self, tx: Tx, task_id: str, attempt_id: str, before: int, added: int
    ) -> None:
        """Compare-and-set on the counter as read in the same transaction."""
        await self._cas(tx, _ADD_BYTES, added, attempt_id, task_id, before)

    async def unmarked_of_unfinished(self) -> list[Evidence]:
        rows = await self._fetch(None, _UNMARKED_OF_UNFINISHED, *_FINISHED)
        return [rec.evidence_from_row(row) for row in rows]

    async def mark_unavailable(self, tx: Tx, task_id: str, evidence_id: str, why: str) -> bool:
        rows = await self._fetch(tx, _MARK, why[:512], evidence_id, task_id)
        return bool(rows)

    async def to_trim(self, cutoff_ms: int, limit: int) -> list[str]:
        rows = await self._fetch(None, _TO_TRIM, *_FINISHED, cutoff_ms, limit)
        return [str(row["id"]) for row in rows]

    async def trimmed_at(self, tx: Tx | None, task_id: str) -> int | None:
        rows = await self._fetch(tx, _TRIMMED_AT, task_id)
        value = rows[0]["trimmed_at_ms"] if rows else None
        return int(value) if value is not None else None

    async def trim(
        self, tx: Tx, task_id: str, now: int, why: str
    ) -> tuple[int, int, int, int, int]:
        """Trim a finished task's bulky records (Stale if it is not finished or was trimmed
        since it last finished): events other than state changes, evidence render payloads (the
        references marked unavailable, their summaries kept), receipt details, decision
        materials, and its notices with their deliveries. Criteria results, the task's state
        and reason stay. How many of each (deliveries not counted apart)."""
        await self._cas(tx, _TRIMMED, now, task_id, *_FINISHED)
        events = len(await self._fetch(tx, _TRIM_EVENTS, task_id))
        evidence = len(await self._fetch(tx, _TRIM_EVIDENCE, why[:512], task_id))
        effects = len(await self._fetch(tx, _TRIM_EFFECTS, task_id))
        decisions = len(await self._fetch(tx, _TRIM_DECISIONS, task_id))
        await self._fetch(tx, _TRIM_DELIVERIES, task_id)
        notices = len(await self._fetch(tx, _TRIM_NOTICES, task_id))
        return events, evidence, effects, decisions, notices
