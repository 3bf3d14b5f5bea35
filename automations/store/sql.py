"""The schedules' statements, written once with ``?`` placeholders and turned into
PostgreSQL's ``$n`` for that backend. Only this package writes ``schedules`` and
``schedule_events`` (scripts/architecture.py), always inside a transaction opened through the
coordinator's door (``Transitions.transaction``), beside the runs a fire creates.

The claim of a due schedule is the exactly-once hinge: PostgreSQL locks the row FOR UPDATE
SKIP LOCKED, so two scheduler replicas never hold the same schedule, and a replica killed
mid-transaction releases it with nothing committed; SQLite's single writer (BEGIN IMMEDIATE)
serializes the replicas. Every update also compares ``version``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from automations.domain.model import Note, Schedule, ScheduleEvent
from automations.store.rows import COLUMNS, MUTABLE, schedule_from_row, values
from coordinator.store.base import RunTxReader


class ScheduleExists(Exception):
    pass


class ScheduleChanged(Exception):
    """The row's version moved since it was read: nothing was written."""


_SELECT = f"SELECT {', '.join(COLUMNS)} FROM schedules"
_INSERT = (
    f"INSERT INTO schedules ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)}) ON CONFLICT DO NOTHING RETURNING version"
)
_UPDATE = (
    f"UPDATE schedules SET {', '.join(f'{c} = ?' for c in MUTABLE)} "
    "WHERE project_id = ? AND schedule_id = ? AND version = ? RETURNING version"
)
_DELETE = (
    "DELETE FROM schedules WHERE project_id = ? AND schedule_id = ? AND version = ? "
    "RETURNING version"
)
_GET = f"{_SELECT} WHERE project_id = ? AND schedule_id = ?"
_DUE = f"{_SELECT} WHERE wake_ms <= ? ORDER BY wake_ms LIMIT 1"
_NEXT_WAKE = "SELECT MIN(wake_ms) FROM schedules"
_LAST_SEQUENCE = (
    "SELECT COALESCE(MAX(sequence), 0) FROM schedule_events "
    "WHERE project_id = ? AND schedule_id = ?"
)
_APPEND = (
    "INSERT INTO schedule_events (project_id, schedule_id, sequence, type, fire_ms, run_id, "
    "message, actor_type, actor_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: Old events, each schedule's newest kept (its number goes on from there).
_EXPIRED_EVENTS = (
    "DELETE FROM schedule_events WHERE (project_id, schedule_id, sequence) IN ("
    "SELECT e.project_id, e.schedule_id, e.sequence FROM schedule_events e "
    "WHERE e.created_at_ms < ? AND e.sequence < (SELECT MAX(n.sequence) FROM schedule_events n "
    "WHERE n.project_id = e.project_id AND n.schedule_id = e.schedule_id) LIMIT ?) "
    "RETURNING sequence"
)
_EVENTS = (
    "SELECT sequence, type, message, fire_ms, run_id, actor_type, actor_id, created_at_ms "
    "FROM schedule_events WHERE project_id = ? AND schedule_id = ? AND sequence < ? "
    "ORDER BY sequence DESC LIMIT ?"
)


def _dollars(sql: str) -> str:
    parts = sql.split("?")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]


Read = Callable[..., Awaitable[list[Any]]]


@dataclass(frozen=True, slots=True)
class _Dialect:
    postgres: bool

    def sql(self, text: str, lock: bool = False) -> str:
        if not self.postgres:
            return text
        return _dollars(text) + (" FOR UPDATE SKIP LOCKED" if lock else "")


class ScheduleSql:
    """The schedules' reads and writes on one backend. ``read`` runs a read outside any
    transaction (the pool, or SQLite's reader connection)."""

    def __init__(self, postgres: bool, read: Read) -> None:
        self._d = _Dialect(postgres)
        self._read = read

    async def _fetch(self, tx: RunTxReader | None, sql: str, *args: Any) -> list[Any]:
        if tx is not None:
            return await tx.fetch(sql, *args)
        return await self._read(sql, *args)

    async def insert(self, tx: RunTxReader, schedule: Schedule) -> None:
        row = values(schedule)
        if not await tx.fetch(self._d.sql(_INSERT), *(row[c] for c in COLUMNS)):
            raise ScheduleExists(schedule.schedule_id)

    async def update(self, tx: RunTxReader, schedule: Schedule, expected_version: int) -> None:
        """Write ``schedule`` (its version already the next one) over ``expected_version``."""
        row = values(schedule)
        args = [*(row[c] for c in MUTABLE), schedule.project_id, schedule.schedule_id]
        if not await tx.fetch(self._d.sql(_UPDATE), *args, expected_version):
            raise ScheduleChanged(schedule.schedule_id)

    async def delete(
        self, tx: RunTxReader, project_id: str, schedule_id: str, version: int
    ) -> None:
        if not await tx.fetch(self._d.sql(_DELETE), project_id, schedule_id, version):
            raise ScheduleChanged(schedule_id)

    async def get(
        self, tx: RunTxReader | None, project_id: str, schedule_id: str, lock: bool = False
    ) -> Schedule | None:
        """One schedule; ``lock`` (in a transaction) holds its row until the commit."""
        sql = self._d.sql(_GET) + (" FOR UPDATE" if lock and self._d.postgres else "")
        rows = await self._fetch(tx, sql, project_id, schedule_id)
        return schedule_from_row(rows[0]) if rows else None

    async def claim_due(self, tx: RunTxReader, now_ms: int) -> Schedule | None:
        """The most overdue schedule no other replica holds, locked until the commit."""
        rows = await tx.fetch(self._d.sql(_DUE, lock=True), now_ms)
        return schedule_from_row(rows[0]) if rows else None

    async def next_wake(self) -> int | None:
        rows = await self._read(self._d.sql(_NEXT_WAKE))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    async def list_schedules(
        self, project_ids: Sequence[str] | None, after: tuple[str, str] | None, limit: int
    ) -> list[Schedule]:
        """In (project, id) order, strictly after ``after``; ``None`` projects = all."""
        where: list[str] = []
        args: list[object] = []
        if project_ids is not None:
            if not project_ids:
                return []
            where.append(f"project_id IN ({', '.join('?' for _ in project_ids)})")
            args.extend(project_ids)
        if after is not None:
            where.append("(project_id > ? OR (project_id = ? AND schedule_id > ?))")
            args.extend([after[0], after[0], after[1]])
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"{_SELECT}{clause} ORDER BY project_id, schedule_id LIMIT ?"
        rows = await self._read(self._d.sql(sql), *args, limit)
        return [schedule_from_row(row) for row in rows]

    async def append(
        self,
        tx: RunTxReader,
        schedule: Schedule,
        notes: Sequence[Note],
        actor: tuple[str, str],
        now_ms: int,
    ) -> None:
        """Number the notes after the schedule's last event (its row is locked, or SQLite's
        single writer holds the database, so nobody else numbers them meanwhile)."""
        if not notes:
            return
        key = (schedule.project_id, schedule.schedule_id)
        rows = await tx.fetch(self._d.sql(_LAST_SEQUENCE), *key)
        sequence = int(rows[0][0])
        for note in notes:
            sequence += 1
            await tx.fetch(
                self._d.sql(_APPEND),
                *key,
                sequence,
                note.type,
                note.fire_ms,
                note.run_id,
                note.message[:1024],
                actor[0],
                actor[1],
                now_ms,
            )

    async def delete_events_before(self, tx: RunTxReader, cutoff_ms: int, limit: int) -> int:
        """Retention: up to ``limit`` events older than the cutoff; how many went."""
        return len(await tx.fetch(self._d.sql(_EXPIRED_EVENTS), cutoff_ms, limit))

    async def events(
        self, project_id: str, schedule_id: str, before_sequence: int, limit: int
    ) -> list[ScheduleEvent]:
        """Newest first, each older than ``before_sequence`` (0: from the newest)."""
        before = before_sequence or 2**62
        rows = await self._read(self._d.sql(_EVENTS), project_id, schedule_id, before, limit)
        return [
            ScheduleEvent(
                int(r["sequence"]),
                r["type"],
                r["message"],
                r["fire_ms"],
                r["run_id"],
                r["actor_type"],
                r["actor_id"],
                int(r["created_at_ms"]),
            )
            for r in rows
        ]
