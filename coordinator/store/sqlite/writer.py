"""The SQLite store's writes, on the writer connection: one decision (with its AIP-155
record), several in one transaction, the transaction the door hands out (SqliteTx) and output
retention. Each write is one IMMEDIATE transaction (connection.py)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from typing import Any

from coordinator.domain.decide import AttemptWrite, Decision, RunWrite
from coordinator.domain.model import Attempt
from coordinator.store.base import (
    Applied,
    CasMiss,
    DedupeKeyTaken,
    GrantTaken,
    IdempotencyKeyTaken,
    Loaded,
    RequestIdTaken,
    RequestRecord,
    Scan,
)
from coordinator.store.output_sql import output_rows
from coordinator.store.rows import (
    ATTEMPT_MUTABLE,
    RUN_MUTABLE,
    attempt_from_row,
    attempt_values,
    grant_values,
    run_from_row,
    run_mutable_values,
    run_values,
)
from coordinator.store.snapshots import encode, run_snapshot
from coordinator.store.sql import (
    TERMINAL_STATUSES,
    batchable,
    events_from_decision,
    stored_events,
)
from coordinator.store.sqlite.connection import SqliteConnections
from coordinator.store.sqlite.sql import (
    ATTEMPT_INSERT,
    ATTEMPT_UPDATE,
    EVENT_INSERT,
    EVENTS_ONLY,
    FIND_BY_KEY,
    LOAD,
    OPEN_IN_SCOPE,
    OUTPUT_DELETE,
    OUTPUT_INSERT,
    PUT_GRANT,
    PUT_REQUEST,
    RUN_INSERT,
    RUN_UPDATE,
    load_runs_sql,
    lock_scan_sql,
)
from kernel.ids import now_ms
from kernel.records import replace


class SqliteWriter(SqliteConnections):
    """The writes of SqliteStore."""

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
            try:
                # Inside the try: a caller cancelled while BEGIN waits for the writer thread
                # still gets it undone, since the thread runs the BEGIN and then this
                # ROLLBACK in order (else the connection stays in a transaction and every
                # later BEGIN fails).
                await self._write(self._begin_immediate)
                yield SqliteTx(self)
                await self._write(lambda conn: conn.execute("COMMIT"))
            except BaseException:
                # surely: a second cancel while the ROLLBACK waits behind the body's last
                # statement must not withdraw it (the same open transaction, found by CI)
                await self._write(_rollback_if_open, surely=True)
                raise

    async def apply_creates(
        self, creates: Sequence[tuple[Decision, RequestRecord | None]]
    ) -> list[Applied]:
        """One IMMEDIATE transaction, one commit, for the whole group."""
        items = [(decision, None, request) for decision, request in creates]
        async with self._write_lock:
            return await self._write(lambda conn: self._apply_many(conn, items))

    def _apply(
        self,
        conn: sqlite3.Connection,
        decision: Decision,
        dedupe_key: str | None,
        request: RequestRecord | None,
    ) -> Applied:
        return self._apply_many(conn, [(decision, dedupe_key, request)])[0]

    def _apply_many(
        self,
        conn: sqlite3.Connection,
        items: Sequence[tuple[Decision, str | None, RequestRecord | None]],
    ) -> list[Applied]:
        self._begin_immediate(conn)
        try:
            written = []
            for decision, dedupe_key, request in items:
                applied = _write_decision(conn, decision, dedupe_key)
                if request is not None:
                    conn.execute(
                        PUT_REQUEST,
                        (
                            request.request_id,
                            request.method,
                            request.payload_hash,
                            encode(run_snapshot(applied.run, applied.attempt)),
                            decision.run.updated_at_ms,
                        ),
                    )
                written.append(applied)
            conn.execute("COMMIT")
            return written
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

    async def delete_output(self, finished_before_ms: int, limit: int) -> int:
        def run(conn: sqlite3.Connection) -> int:
            self._begin_immediate(conn)
            try:
                deleted = conn.execute(OUTPUT_DELETE, (finished_before_ms, limit)).rowcount
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return int(deleted)

        async with self._write_lock:
            return await self._write(run)

    async def apply_all(self, decisions: Sequence[Decision]) -> list[Applied]:
        def run(conn: sqlite3.Connection) -> list[Applied]:
            self._begin_immediate(conn)
            try:
                applied = [_write_in_batch(conn, decision) for decision in decisions]
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return applied

        async with self._write_lock:
            return await self._write(run)


def _rollback_if_open(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class SqliteTx:
    """The store's operations inside one open transaction (see SqliteWriter.transaction)."""

    def __init__(self, store: SqliteConnections) -> None:
        self._store = store

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        params = {"run_id": run_id, "attempt_id": attempt_id, "dedupe": dedupe_key}
        row = await self._store._write(lambda conn: conn.execute(LOAD, params).fetchone())
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"), bool(row["dedupe_hit"]))

    async def load_runs(self, run_ids: Sequence[str]) -> dict[str, Loaded]:
        if not run_ids:
            return {}
        sql = load_runs_sql(len(run_ids))
        rows = await self._store._write(lambda conn: conn.execute(sql, list(run_ids)).fetchall())
        return {row["id"]: Loaded(run_from_row(row), attempt_from_row(row, "a_")) for row in rows}

    async def apply(self, decision: Decision, dedupe_key: str | None = None) -> Applied:
        """A miss raises and aborts the whole transaction: batches are all-or-nothing."""
        return await self._store._write(lambda conn: _write_decision(conn, decision, dedupe_key))

    async def apply_many(self, decisions: Sequence[Decision]) -> list[Applied]:
        return await self._store._write(
            lambda conn: [_write_in_batch(conn, decision) for decision in decisions]
        )

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return await self._store._write(lambda conn: conn.execute(sql, args).fetchall())

    async def execute(self, sql: str, *args: Any) -> None:
        await self._store._write(lambda conn: conn.execute(sql, args))

    async def open_runs_in_scope(self, scope: str) -> list[str]:
        rows = await self.fetch(OPEN_IN_SCOPE, scope, *TERMINAL_STATUSES)
        return [row[0] for row in rows]

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None:
        row = await self._store._write(
            lambda conn: conn.execute(FIND_BY_KEY, (project_id, key)).fetchone()
        )
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"))

    async def put_request(self, record: RequestRecord, snapshot: dict[str, Any]) -> None:
        response = encode(snapshot)

        def insert(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    PUT_REQUEST,
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
        rows = await self.fetch(lock_scan_sql(scan, len(skip)), mark_ms, *skip, limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]


def _write_in_batch(conn: sqlite3.Connection, decision: Decision) -> Applied:
    """One decision of a batch: as PostgreSQL's batch statement numbers a run and attempt
    update's events from the event sequence the decision read, an event appended since then
    (a note: the version unchanged) is a miss here too (postgres/batch.py)."""
    applied = _write_decision(conn, decision, None)
    expected = decision.run.event_sequence + len(decision.events)
    if batchable(decision) and applied.run.event_sequence != expected:
        raise CasMiss(f"run {decision.run.id}'s events moved since it was read")
    return applied


def _write_decision(
    conn: sqlite3.Connection, decision: Decision, dedupe_key: str | None
) -> Applied:
    run = decision.run
    events = events_from_decision(decision)
    n_events = events["n_events"]
    if decision.run_write is RunWrite.INSERT:
        conn.execute(RUN_INSERT, {**run_values(run), "event_sequence": n_events})
        sequence = n_events
    else:
        if decision.run_write is RunWrite.UPDATE:
            params = dict(zip(RUN_MUTABLE, run_mutable_values(run), strict=True))
            params.update(id=run.id, expected_version=decision.expected_version, n_events=n_events)
            row = conn.execute(RUN_UPDATE, params).fetchone()
        else:
            row = conn.execute(EVENTS_ONLY, {"id": run.id, "n_events": n_events}).fetchone()
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
        if conn.execute(ATTEMPT_UPDATE, params).rowcount != 1:
            raise CasMiss(f"attempt {attempt.id} moved")
    elif decision.attempt_write is AttemptWrite.INSERT and attempt is not None:
        conn.execute(ATTEMPT_INSERT, attempt_values(attempt))
    if decision.output:
        conn.executemany(OUTPUT_INSERT, output_rows(decision.output, run.updated_at_ms))
    if decision.grant is not None:
        try:
            conn.execute(PUT_GRANT, grant_values(run.id, decision.grant))
        except sqlite3.IntegrityError as exc:
            raise GrantTaken(str(exc)) from exc
    first = sequence - n_events + 1
    for i, event in enumerate(decision.events):
        conn.execute(
            EVENT_INSERT,
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
