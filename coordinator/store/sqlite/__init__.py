"""SQLite backend, the embedded default.

SQLite has one writer: every write transaction starts with ``BEGIN IMMEDIATE`` so it holds the
write lock before it reads, and a busy database is retried a bounded number of times before
STORE_BUSY is reported (nothing was written then, so a retry can never duplicate an event).
Each connection lives on its own thread: one writer, one reader (WAL lets them overlap).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

from coordinator.domain.cursor import EventCursor
from coordinator.domain.decide import AttemptWrite, Decision, RunWrite
from coordinator.domain.model import Attempt, Run, RunEvent
from coordinator.domain.output import Stored
from coordinator.store.base import (
    Applied,
    CasMiss,
    DedupeKeyTaken,
    IdempotencyKeyTaken,
    Loaded,
    RequestIdTaken,
    RequestRecord,
    RunCursor,
    RunFilter,
    Scan,
    StoredRequest,
)
from coordinator.store.output_sql import (
    OUTPUT_COLUMNS,
    delete_sql,
    output_rows,
    read_sql,
    stored_from_row,
)
from coordinator.store.rows import (
    ATTEMPT_COLUMNS,
    ATTEMPT_MUTABLE,
    EVENT_COLUMNS,
    EVENT_READ_COLUMNS,
    RUN_COLUMNS,
    RUN_MUTABLE,
    attempt_from_row,
    attempt_set_clause,
    attempt_values,
    event_from_row,
    run_from_row,
    run_values,
)
from coordinator.store.sql import (
    TERMINAL_STATUSES,
    events_from_decision,
    queue_position_sql,
    scan_sql,
    stored_events,
)
from kernel.errors import StoreBusy
from kernel.ids import now_ms

T = TypeVar("T")

_RUN_SELECT = ", ".join(f"r.{c}" for c in RUN_COLUMNS)
_ATTEMPT_SELECT = ", ".join(f"a.{c} AS a_{c}" for c in ATTEMPT_COLUMNS)
_LOAD = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT},
       (:dedupe IS NOT NULL AND EXISTS (
           SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.dedupe_key = :dedupe))
           AS dedupe_hit
FROM runs r
LEFT JOIN attempts a ON a.id = COALESCE(:attempt_id, r.current_attempt_id) AND a.run_id = r.id
WHERE r.id = :run_id"""
_RUN_UPDATE = (
    f"UPDATE runs SET {', '.join(f'{c} = :{c}' for c in RUN_MUTABLE)}, "
    "event_sequence = event_sequence + :n_events "
    "WHERE id = :id AND version = :expected_version RETURNING event_sequence"
)
_EVENTS_ONLY = (
    "UPDATE runs SET event_sequence = event_sequence + :n_events WHERE id = :id "
    "RETURNING event_sequence"
)
_RUN_INSERT = (
    f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in RUN_COLUMNS)})"
)
_ATTEMPT_UPDATE = (
    f"UPDATE attempts SET {attempt_set_clause(lambda c: ':' + c, ':lease_written')} "
    "WHERE id = :id AND status = :expected_status AND last_event_seq = :expected_seq"
)
_ATTEMPT_INSERT = (
    f"INSERT INTO attempts ({', '.join(ATTEMPT_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in ATTEMPT_COLUMNS)})"
)
# One writer commits transactions one after another, so numbering events as they are inserted
# is numbering them in commit order; tx_id stays 0 (docs/events.md).
_EVENT_INSERT = (
    f"INSERT INTO run_events ({', '.join(EVENT_COLUMNS)}, position) "
    f"VALUES ({', '.join(':' + c for c in EVENT_COLUMNS)}, "
    "(SELECT COALESCE(MAX(position), 0) + 1 FROM run_events WHERE tx_id = 0))"
)
_OUTPUT_INSERT = f"INSERT INTO attempt_output ({', '.join(OUTPUT_COLUMNS)}) VALUES (?, ?, ?, ?, ?)"
_OUTPUT_READ = read_sql(lambda n: "?" + n)
_OUTPUT_DELETE = delete_sql(lambda n: "?" + n)
_FIND_BY_KEY = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}, 0 AS dedupe_hit
FROM runs r LEFT JOIN attempts a ON a.id = r.current_attempt_id
WHERE r.project_id = ? AND r.idempotency_key = ?"""
_LIST_EVENTS = (
    f"SELECT {', '.join(EVENT_READ_COLUMNS)} FROM run_events WHERE run_id = ? AND sequence > ? "
    "ORDER BY sequence LIMIT ?"
)
# The reader sees committed transactions only, and the one writer numbered their events in
# commit order, so everything it sees is stable (docs/events.md).
_PROJECT_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE project_id = ? AND (tx_id, position) > (?, ?)
ORDER BY tx_id, position LIMIT ?"""
_ALL_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE (tx_id, position) > (?, ?)
ORDER BY tx_id, position LIMIT ?"""
_LAST_EVENT_CURSOR = (
    "SELECT tx_id, position FROM run_events ORDER BY tx_id DESC, position DESC LIMIT 1"
)
_LIST_ATTEMPTS = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE run_id = ? ORDER BY attempt_no"
)
_QUEUE_POSITION = queue_position_sql("?1", "?2", "?3", "?4", "?5", "?6")
_RECORD_LINEAGE = """
INSERT INTO runtime_instances
    (owner_id, runtime_instance_id, lineage, first_hello_at_ms, last_hello_at_ms)
VALUES (?1, ?2, ?3, ?4, ?4)
ON CONFLICT (owner_id, runtime_instance_id)
DO UPDATE SET lineage = excluded.lineage, last_hello_at_ms = excluded.last_hello_at_ms
RETURNING first_hello_at_ms"""
_EARLIER_IN_LINEAGE = """
SELECT runtime_instance_id FROM runtime_instances
WHERE owner_id = ?1 AND lineage = ?2 AND replaced_at_ms IS NULL
  AND (first_hello_at_ms, runtime_instance_id) < (?3, ?4)
ORDER BY first_hello_at_ms, runtime_instance_id"""
_BIND_INSTANCE = (
    "INSERT INTO runtime_bindings (runtime_instance_id, owner_id, bound_at_ms)"
    " VALUES (?1, ?2, ?3) ON CONFLICT (runtime_instance_id) DO NOTHING"
)
_BOUND_OWNER = "SELECT owner_id FROM runtime_bindings WHERE runtime_instance_id = ?1"
_MARK_REPLACED = (
    "UPDATE runtime_instances SET replaced_at_ms = ?1"
    " WHERE owner_id = ?2 AND runtime_instance_id = ?3 AND replaced_at_ms IS NULL"
)


def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


class SqliteStore:
    def __init__(self, path: str, busy_timeout_ms: int = 2000, busy_retries: int = 5) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._busy_retries = busy_retries
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="truerun-sqlite-writer")
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="truerun-sqlite-reader")
        self._write_conn: sqlite3.Connection | None = None
        # One transaction at a time on the writer connection (SQLite's single writer).
        self._write_lock = asyncio.Lock()
        self._read_conn: sqlite3.Connection | None = None

    @classmethod
    async def open(
        cls, path: str, busy_timeout_ms: int = 2000, busy_retries: int = 5
    ) -> SqliteStore:
        store = cls(path, busy_timeout_ms, busy_retries)
        await store._write(lambda conn: None)
        await store._read(lambda conn: None)
        return store

    async def close(self) -> None:
        def close_write() -> None:
            if self._write_conn is not None:
                self._write_conn.close()

        def close_read() -> None:
            if self._read_conn is not None:
                self._read_conn.close()

        await asyncio.get_running_loop().run_in_executor(self._writer, close_write)
        await asyncio.get_running_loop().run_in_executor(self._reader, close_read)
        self._writer.shutdown(wait=True)
        self._reader.shutdown(wait=True)

    # -- threads ------------------------------------------------------------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            if self._write_conn is None:
                self._write_conn = _connect(self._path, self._busy_timeout_ms)
            return fn(self._write_conn)

        return await asyncio.get_running_loop().run_in_executor(self._writer, run)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            if self._read_conn is None:
                self._read_conn = _connect(self._path, self._busy_timeout_ms)
            return fn(self._read_conn)

        return await asyncio.get_running_loop().run_in_executor(self._reader, run)

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        delay = 0.01
        for attempt in range(self._busy_retries):
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if attempt + 1 == self._busy_retries:
                    break
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        raise StoreBusy(f"the database stayed locked through {self._busy_retries} tries")

    # -- protocol -----------------------------------------------------------------------------

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        params = {"run_id": run_id, "attempt_id": attempt_id, "dedupe": dedupe_key}
        row = await self._read(lambda conn: conn.execute(_LOAD, params).fetchone())
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"), bool(row["dedupe_hit"]))

    async def apply(
        self, decision: Decision, dedupe_key: str | None, request: RequestRecord | None
    ) -> Applied:
        async with self._write_lock:
            return await self._write(lambda conn: self._apply(conn, decision, dedupe_key, request))

    @contextlib.asynccontextmanager
    async def transaction(self, lock_keys: Sequence[str]) -> AsyncIterator[SqliteTx]:
        """One IMMEDIATE transaction: SQLite's single writer lock stands in for every
        advisory lock PostgreSQL would take."""
        async with self._write_lock:
            await self._write(self._begin_immediate)
            try:
                yield SqliteTx(self)
            except BaseException:
                await self._write(lambda conn: conn.execute("ROLLBACK"))
                raise
            await self._write(lambda conn: conn.execute("COMMIT"))

    def _apply(
        self,
        conn: sqlite3.Connection,
        decision: Decision,
        dedupe_key: str | None,
        request: RequestRecord | None,
    ) -> Applied:
        self._begin_immediate(conn)
        try:
            applied = _write_decision(conn, decision, dedupe_key)
            if request is not None:
                conn.execute(
                    "INSERT INTO request_log (request_id, method, payload_hash, response,"
                    " created_at_ms) VALUES (?, ?, ?, ?, ?)",
                    (
                        request.request_id,
                        request.method,
                        request.payload_hash,
                        request.render(applied),
                        decision.run.updated_at_ms,
                    ),
                )
            conn.execute("COMMIT")
            return applied
        except sqlite3.IntegrityError as exc:
            conn.execute("ROLLBACK")
            message = str(exc)
            if "request_log" in message:
                raise RequestIdTaken(message) from exc
            if "dedupe_key" in message:
                raise DedupeKeyTaken(message) from exc
            if "idempotency_key" in message:
                raise IdempotencyKeyTaken(message) from exc
            raise
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None:
        row = await self._read(
            lambda conn: conn.execute(_FIND_BY_KEY, (project_id, key)).fetchone()
        )
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"))

    async def get_request(self, request_id: str) -> StoredRequest | None:
        row = await self._read(
            lambda conn: conn.execute(
                "SELECT method, payload_hash, response FROM request_log WHERE request_id = ?",
                (request_id,),
            ).fetchone()
        )
        if row is None:
            return None
        return StoredRequest(row["method"], row["payload_hash"], bytes(row["response"]))

    async def list_runs(
        self, run_filter: RunFilter, after: RunCursor | None, limit: int
    ) -> Sequence[Loaded]:
        clauses: list[str] = []
        args: list[Any] = []
        for column, value in (
            ("project_id", run_filter.project_id),
            ("owner_id", run_filter.owner_id),
            ("agent_id", run_filter.agent_id),
        ):
            if value:
                clauses.append(f"r.{column} = ?")
                args.append(value)
        if run_filter.statuses:
            statuses = sorted(s.value for s in run_filter.statuses)
            clauses.append(f"r.status IN ({', '.join('?' for _ in statuses)})")
            args.extend(statuses)
        if after is not None:
            clauses.append("(r.created_at_ms < ? OR (r.created_at_ms = ? AND r.id < ?))")
            args.extend([after.created_at_ms, after.created_at_ms, after.run_id])
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = (
            f"SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}, 0 AS dedupe_hit FROM runs r "
            f"LEFT JOIN attempts a ON a.id = r.current_attempt_id {where} "
            "ORDER BY r.created_at_ms DESC, r.id DESC LIMIT ?"
        )
        args.append(limit)
        rows = await self._read(lambda conn: conn.execute(sql, args).fetchall())
        return [Loaded(run_from_row(row), attempt_from_row(row, "a_")) for row in rows]

    async def list_events(self, run_id: str, after_sequence: int, limit: int) -> Sequence[RunEvent]:
        rows = await self._read(
            lambda conn: conn.execute(_LIST_EVENTS, (run_id, after_sequence, limit)).fetchall()
        )
        return [event_from_row(row) for row in rows]

    async def list_project_events(
        self, project_id: str | None, after: EventCursor | None, limit: int
    ) -> Sequence[RunEvent]:
        tx_id, position = (after.tx_id, after.position) if after else (-1, -1)
        args: tuple[str | int, ...]
        if project_id is None:
            sql, args = _ALL_EVENTS, (tx_id, position, limit)
        else:
            sql, args = _PROJECT_EVENTS, (project_id, tx_id, position, limit)
        rows = await self._read(lambda conn: conn.execute(sql, args).fetchall())
        return [event_from_row(row) for row in rows]

    async def last_event_cursor(self) -> EventCursor | None:
        row = await self._read(lambda conn: conn.execute(_LAST_EVENT_CURSOR).fetchone())
        return EventCursor(row[0], row[1]) if row else None

    async def read(self, sql: str, *args: Any) -> list[Any]:
        """A read-only query on the reader connection (WAL: never blocked by the writer)."""
        return await self._read(lambda conn: conn.execute(sql, args).fetchall())

    async def write(self, sql: str, *args: Any) -> None:
        """One statement in its own IMMEDIATE transaction."""

        def run(conn: sqlite3.Connection) -> None:
            self._begin_immediate(conn)
            try:
                conn.execute(sql, args)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        async with self._write_lock:
            await self._write(run)

    async def list_attempts(self, run_id: str) -> Sequence[Attempt]:
        rows = await self._read(lambda conn: conn.execute(_LIST_ATTEMPTS, (run_id,)).fetchall())
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def read_output(self, attempt_id: str, offset: int, limit: int) -> Sequence[Stored]:
        rows = await self.read(_OUTPUT_READ, attempt_id, offset, limit)
        return [stored_from_row(attempt_id, row) for row in rows]

    async def delete_output(self, finished_before_ms: int, limit: int) -> int:
        def run(conn: sqlite3.Connection) -> int:
            self._begin_immediate(conn)
            try:
                deleted = conn.execute(_OUTPUT_DELETE, (finished_before_ms, limit)).rowcount
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return int(deleted)

        async with self._write_lock:
            return await self._write(run)

    async def load_attempts(self, attempt_ids: Sequence[str]) -> dict[str, Loaded]:
        if not attempt_ids:
            return {}
        marks = ", ".join("?" for _ in attempt_ids)
        rows = await self.read(
            f"SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT} FROM attempts a "
            f"JOIN runs r ON r.id = a.run_id WHERE a.id IN ({marks})",
            *attempt_ids,
        )
        return {row["a_id"]: Loaded(run_from_row(row), attempt_from_row(row, "a_")) for row in rows}

    async def apply_all(self, decisions: Sequence[Decision]) -> list[Applied]:
        def run(conn: sqlite3.Connection) -> list[Applied]:
            self._begin_immediate(conn)
            try:
                applied = [_write_decision(conn, decision, None) for decision in decisions]
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return applied

        async with self._write_lock:
            return await self._write(run)

    async def renew_leases(
        self,
        owner_id: str,
        runtime_instance_id: str,
        attempt_ids: Sequence[str],
        now_ms: int,
        until_ms: int,
        token_until_ms: int = 0,
    ) -> int:
        if not attempt_ids:
            return 0
        marks = ", ".join("?" for _ in attempt_ids)

        def run(conn: sqlite3.Connection) -> int:
            self._begin_immediate(conn)
            try:
                cursor = conn.execute(
                    "UPDATE attempts SET heartbeat_at_ms = ?, lease_expires_at_ms = "
                    "max(coalesce(lease_expires_at_ms, 0), ?), callback_token_expires_at_ms = "
                    "max(callback_token_expires_at_ms, ?) WHERE owner_id = ? AND "
                    "runtime_instance_id = ? AND status IN ('starting', 'running') AND "
                    f"id IN ({marks})",
                    (now_ms, until_ms, token_until_ms, owner_id, runtime_instance_id, *attempt_ids),
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return cursor.rowcount

        async with self._write_lock:
            return await self._write(run)

    async def expired_leases(self, now_ms: int, limit: int) -> Sequence[Attempt]:
        rows = await self.read(
            f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE status IN "
            "('claimed', 'starting', 'running') AND lease_expires_at_ms < ? AND "
            "sync_state <> 'stale' ORDER BY lease_expires_at_ms, id LIMIT ?",
            now_ms,
            limit,
        )
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def silent_unknowns(self, silent_since_ms: int, limit: int) -> Sequence[Attempt]:
        rows = await self.read(
            f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE status IN "
            "('starting', 'running') AND sync_state = 'stale' AND lease_expires_at_ms < ? "
            "ORDER BY lease_expires_at_ms, id LIMIT ?",
            silent_since_ms,
            limit,
        )
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def oldest_non_terminal(self) -> dict[str, int]:
        marks = ", ".join("?" for _ in TERMINAL_STATUSES)
        rows = await self.read(
            f"SELECT status, min(updated_at_ms) FROM runs WHERE status NOT IN ({marks}) "
            "GROUP BY status",
            *TERMINAL_STATUSES,
        )
        return {row[0]: int(row[1]) for row in rows}

    async def due_retries(self, updated_before_ms: int, limit: int) -> Sequence[str]:
        rows = await self.read(
            "SELECT id FROM runs WHERE status = 'retry_wait' AND updated_at_ms < ? "
            "ORDER BY updated_at_ms, id LIMIT ?",
            updated_before_ms,
            limit,
        )
        return [row[0] for row in rows]

    async def started_attempts(self, owner_id: str, runtime_instance_id: str) -> Sequence[Attempt]:
        rows = await self.read(
            f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE owner_id = ? AND "
            "runtime_instance_id = ? AND status IN ('starting', 'running')",
            owner_id,
            runtime_instance_id,
        )
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def record_lineage(
        self, owner_id: str, runtime_instance_id: str, lineage: str, now_ms: int
    ) -> Sequence[str]:
        def run(conn: sqlite3.Connection) -> list[str]:
            self._begin_immediate(conn)
            try:
                args = (owner_id, runtime_instance_id, lineage, now_ms)
                (first,) = conn.execute(_RECORD_LINEAGE, args).fetchone()
                earlier = (owner_id, lineage, first, runtime_instance_id)
                rows = conn.execute(_EARLIER_IN_LINEAGE, earlier).fetchall()
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return [row[0] for row in rows]

        async with self._write_lock:
            return await self._write(run)

    async def bind_instance(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> str:
        await self.write(_BIND_INSTANCE, runtime_instance_id, owner_id, now_ms)
        rows = await self.read(_BOUND_OWNER, runtime_instance_id)
        return str(rows[0][0])

    async def mark_replaced(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> None:
        await self.write(_MARK_REPLACED, now_ms, owner_id, runtime_instance_id)

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
        row = await self._read(lambda conn: conn.execute(_QUEUE_POSITION, args).fetchone())
        return int(row[0])


class SqliteTx:
    """The store's operations inside one open transaction (see SqliteStore.transaction)."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        params = {"run_id": run_id, "attempt_id": attempt_id, "dedupe": dedupe_key}
        row = await self._store._write(lambda conn: conn.execute(_LOAD, params).fetchone())
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"), bool(row["dedupe_hit"]))

    async def apply(self, decision: Decision, dedupe_key: str | None = None) -> Applied:
        """A miss raises and aborts the whole transaction: batches are all-or-nothing."""
        return await self._store._write(lambda conn: _write_decision(conn, decision, dedupe_key))

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return await self._store._write(lambda conn: conn.execute(sql, args).fetchall())

    async def execute(self, sql: str, *args: Any) -> None:
        await self._store._write(lambda conn: conn.execute(sql, args))

    async def open_runs_in_scope(self, scope: str) -> list[str]:
        marks = ", ".join("?" for _ in TERMINAL_STATUSES)
        rows = await self.fetch(
            f"SELECT id FROM runs WHERE execution_scope = ? AND status NOT IN ({marks})"
            " ORDER BY created_at_ms, id",
            scope,
            *TERMINAL_STATUSES,
        )
        return [row[0] for row in rows]

    async def put_request(self, record: RequestRecord, committed: Any) -> None:
        response = record.render(committed)

        def insert(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO request_log (request_id, method, payload_hash, response,"
                    " created_at_ms) VALUES (?, ?, ?, ?, ?)",
                    (record.request_id, record.method, record.payload_hash, response, now_ms()),
                )
            except sqlite3.IntegrityError as exc:
                raise RequestIdTaken(str(exc)) from exc

        await self._store._write(insert)

    async def lock(self, lock_keys: Sequence[str]) -> None:
        """Nothing to take: the IMMEDIATE transaction already excludes every other writer."""

    async def lock_scan(
        self, scan: Scan, mark_ms: int, skip: Sequence[str], limit: int
    ) -> Sequence[Attempt]:
        """No row locks: the IMMEDIATE transaction already excludes every other writer."""
        marks = ", ".join("?" for _ in skip)
        where = f"a.id NOT IN ({marks})" if skip else "1 = 1"
        rows = await self.fetch(scan_sql(scan, "?", where, "?", ""), mark_ms, *skip, limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]


def _write_decision(
    conn: sqlite3.Connection, decision: Decision, dedupe_key: str | None
) -> Applied:
    run = decision.run
    events = events_from_decision(decision)
    n_events = events["n_events"]
    if decision.run_write is RunWrite.INSERT:
        conn.execute(_RUN_INSERT, {**run_values(run), "event_sequence": n_events})
        sequence = n_events
    else:
        if decision.run_write is RunWrite.UPDATE:
            row_values = run_values(run)
            params = {c: row_values[c] for c in RUN_MUTABLE}
            params.update(id=run.id, expected_version=decision.expected_version, n_events=n_events)
            row = conn.execute(_RUN_UPDATE, params).fetchone()
        else:
            row = conn.execute(_EVENTS_ONLY, {"id": run.id, "n_events": n_events}).fetchone()
        if row is None:
            raise CasMiss(f"run {run.id} moved past version {decision.expected_version}")
        sequence = row[0]
    attempt = decision.attempt
    if decision.attempt_write is AttemptWrite.UPDATE and attempt is not None:
        values = attempt_values(attempt)
        params = {c: values[c] for c in ATTEMPT_MUTABLE}
        params["lease_written"] = decision.lease_written
        params.update(
            id=attempt.id,
            expected_status=decision.attempt_expected_status.value
            if decision.attempt_expected_status
            else None,
            expected_seq=decision.attempt_expected_seq,
        )
        if conn.execute(_ATTEMPT_UPDATE, params).rowcount != 1:
            raise CasMiss(f"attempt {attempt.id} moved")
    elif decision.attempt_write is AttemptWrite.INSERT and attempt is not None:
        conn.execute(_ATTEMPT_INSERT, attempt_values(attempt))
    if decision.output:
        conn.executemany(_OUTPUT_INSERT, output_rows(decision.output, run.updated_at_ms))
    first = sequence - n_events + 1
    for i, event in enumerate(decision.events):
        conn.execute(
            _EVENT_INSERT,
            {
                "id": events["ev1"][i],
                "run_id": run.id,
                "sequence": first + i,
                "type": event.type,
                "dedupe_key": dedupe_key if i == 0 else None,
                "actor_type": events["ev3"][i],
                "actor_id": events["ev4"][i],
                "attempt_id": event.attempt_id,
                "payload": events["ev6"][i],
                "created_at_ms": events["created"],
                "project_id": run.project_id,
            },
        )
    if run.event_sequence != sequence:
        run = replace(run, event_sequence=sequence)
    return Applied(run, attempt, stored_events(decision, events, sequence, dedupe_key))
