"""The SQLite store's reads (RunReader), on the reader connection: loads, listings, events and
their cursors, output, the reconciler's retry scan, metrics and queue position."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.domain.cursor import EventCursor
from coordinator.domain.model import Attempt, Run, RunEvent
from coordinator.domain.output import Stored
from coordinator.store.base import Loaded, RunCursor, RunFilter, StoredRequest
from coordinator.store.output_sql import stored_from_row
from coordinator.store.rows import attempt_from_row, event_from_row, run_from_row
from coordinator.store.sql import TERMINAL_STATUSES
from coordinator.store.sqlite.connection import SqliteConnections
from coordinator.store.sqlite.sql import (
    ALL_EVENTS,
    DUE_RETRIES,
    FIND_BY_KEY,
    GET_REQUEST,
    LAST_EVENT_CURSOR,
    LIST_ATTEMPTS,
    LIST_EVENTS,
    LOAD,
    OLDEST_NON_TERMINAL,
    OUTPUT_READ,
    PROJECT_EVENTS,
    QUEUE_POSITION,
    QUEUED_BY_PROJECT,
    list_runs_sql,
    load_attempts_sql,
)


class SqliteReader(SqliteConnections):
    """The reads of SqliteStore."""

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        params = {"run_id": run_id, "attempt_id": attempt_id, "dedupe": dedupe_key}
        row = await self._read(lambda conn: conn.execute(LOAD, params).fetchone())
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"), bool(row["dedupe_hit"]))

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None:
        row = await self._read(lambda conn: conn.execute(FIND_BY_KEY, (project_id, key)).fetchone())
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"))

    async def get_request(self, request_id: str) -> StoredRequest | None:
        row = await self._read(lambda conn: conn.execute(GET_REQUEST, (request_id,)).fetchone())
        if row is None:
            return None
        return StoredRequest(row["method"], row["payload_hash"], bytes(row["response"]))

    async def list_runs(
        self, run_filter: RunFilter, after: RunCursor | None, limit: int
    ) -> Sequence[Loaded]:
        sql, args = list_runs_sql(run_filter, after, limit)
        rows = await self._read(lambda conn: conn.execute(sql, args).fetchall())
        return [Loaded(run_from_row(row), attempt_from_row(row, "a_")) for row in rows]

    async def list_events(self, run_id: str, after_sequence: int, limit: int) -> Sequence[RunEvent]:
        rows = await self._read(
            lambda conn: conn.execute(LIST_EVENTS, (run_id, after_sequence, limit)).fetchall()
        )
        return [event_from_row(row) for row in rows]

    async def list_project_events(
        self, project_id: str | None, after: EventCursor | None, limit: int
    ) -> Sequence[RunEvent]:
        tx_id, position = (after.tx_id, after.position) if after else (-1, -1)
        args: tuple[str | int, ...]
        if project_id is None:
            sql, args = ALL_EVENTS, (tx_id, position, limit)
        else:
            sql, args = PROJECT_EVENTS, (project_id, tx_id, position, limit)
        rows = await self._read(lambda conn: conn.execute(sql, args).fetchall())
        return [event_from_row(row) for row in rows]

    async def last_event_cursor(self) -> EventCursor | None:
        row = await self._read(lambda conn: conn.execute(LAST_EVENT_CURSOR).fetchone())
        return EventCursor(row[0], row[1]) if row else None

    async def list_attempts(self, run_id: str) -> Sequence[Attempt]:
        rows = await self._read(lambda conn: conn.execute(LIST_ATTEMPTS, (run_id,)).fetchall())
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def read_output(self, attempt_id: str, offset: int, limit: int) -> Sequence[Stored]:
        rows = await self.read(OUTPUT_READ, attempt_id, offset, limit)
        return [stored_from_row(attempt_id, row) for row in rows]

    async def load_attempts(self, attempt_ids: Sequence[str]) -> dict[str, Loaded]:
        if not attempt_ids:
            return {}
        rows = await self.read(load_attempts_sql(len(attempt_ids)), *attempt_ids)
        return {row["a_id"]: Loaded(run_from_row(row), attempt_from_row(row, "a_")) for row in rows}

    async def oldest_non_terminal(self) -> dict[str, int]:
        rows = await self.read(OLDEST_NON_TERMINAL, *TERMINAL_STATUSES)
        return {row[0]: int(row[1]) for row in rows}

    async def queued_by_project(self) -> dict[str, tuple[int, int]]:
        rows = await self.read(QUEUED_BY_PROJECT)
        return {row[0]: (int(row[1]), int(row[2] or 0)) for row in rows}

    async def due_retries(self, updated_before_ms: int, limit: int) -> Sequence[str]:
        rows = await self.read(DUE_RETRIES, updated_before_ms, limit)
        return [row[0] for row in rows]

    async def queue_position(self, run: Run) -> int:
        if run.queued_at_ms is None or run.status.value != "queued":
            return 0
        args = (
            run.owner_id,
            int(run.run_now),
            run.priority,
            run.queued_at_ms,
            run.id,
            run.project_id,
        )
        row = await self._read(lambda conn: conn.execute(QUEUE_POSITION, args).fetchone())
        return int(row[0])
