"""The PostgreSQL store's writes: one decision (with its AIP-155 record), several in one
transaction, the transaction the door hands out (PostgresTx) and output retention.

A transition is one round trip: compare-and-set of the run, the attempt write and the event
append form one data-modifying CTE (postgres/sql.py), so they commit together or not at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import asyncpg

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
from coordinator.store.postgres.batch import apply_batch
from coordinator.store.postgres.creates import apply_creates, groupable
from coordinator.store.postgres.reader import load_on
from coordinator.store.postgres.sql import (
    ADVISORY_LOCKS,
    FIND_BY_KEY,
    LOAD_RUNS,
    OPEN_IN_SCOPE,
    OUTPUT_DELETE,
    PUT_GRANT,
    PUT_REQUEST,
    SCANS,
    STATEMENTS,
)
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
from kernel.ids import now_ms
from kernel.records import replace


class PostgresWriter:
    """The writes of PostgresStore, on its pool."""

    _pool: asyncpg.Pool

    async def apply(
        self, decision: Decision, dedupe_key: str | None, request: RequestRecord | None
    ) -> Applied:
        if dedupe_key is None and groupable(decision):
            # a lone create: the group statement for a group of one, whose rows asyncpg
            # encodes cheaper than this path's scalars, and which writes the AIP-155 record
            # in the same statement instead of a transaction of two
            (applied,) = await self.apply_creates([(decision, request)])
            return applied
        async with self._pool.acquire() as conn:
            if request is None:
                return await _apply_on(conn, decision, dedupe_key)
            with _translated_errors():
                async with conn.transaction():
                    applied = await _apply_on(conn, decision, dedupe_key)
                    await conn.execute(
                        PUT_REQUEST,
                        request.request_id,
                        request.method,
                        request.payload_hash,
                        encode(run_snapshot(applied.run, applied.attempt)),
                        decision.run.updated_at_ms,
                    )
                    return applied

    async def apply_creates(
        self, creates: Sequence[tuple[Decision, RequestRecord | None]]
    ) -> list[Applied]:
        """One statement, so one round trip and one commit, for the whole group."""
        if not all(groupable(decision) for decision, _ in creates):
            raise ValueError("apply_creates writes only creates")
        async with self._pool.acquire() as conn:
            with _translated_errors():
                return await apply_creates(conn, creates)

    @contextlib.asynccontextmanager
    async def transaction(self, lock_keys: Sequence[str]) -> AsyncIterator[PostgresTx]:
        """One transaction holding transaction-scoped advisory locks, taken in the given order."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self._lock(conn, lock_keys)
            yield PostgresTx(conn)

    @staticmethod
    async def _lock(conn: asyncpg.Connection, lock_keys: Sequence[str]) -> None:
        if lock_keys:  # one round trip, the locks still taken in the given order
            await conn.execute(ADVISORY_LOCKS, list(lock_keys))

    async def delete_output(self, finished_before_ms: int, limit: int) -> int:
        status = await self._pool.execute(OUTPUT_DELETE, finished_before_ms, limit)
        return int(status.split()[-1])

    async def apply_all(self, decisions: Sequence[Decision]) -> list[Applied]:
        """In attempt-id order (as renew_leases locks them), answered in the given order.
        Decisions that all fit the batch statement are that one statement, all or nothing by
        itself (no BEGIN and COMMIT round trips); any other joins them in a transaction."""
        if not decisions:
            return []
        order = sorted(range(len(decisions)), key=lambda i: _lock_order(decisions[i]))
        together = [i for i in order if batchable(decisions[i])]
        alone = [i for i in order if not batchable(decisions[i])]
        applied: dict[int, Applied] = {}
        try:
            async with self._pool.acquire() as conn:
                if not alone:
                    written = await apply_batch(conn, [decisions[i] for i in together])
                    applied.update(zip(together, written, strict=True))
                else:
                    async with conn.transaction():
                        if together:
                            written = await apply_batch(conn, [decisions[i] for i in together])
                            applied.update(zip(together, written, strict=True))
                        for i in alone:
                            applied[i] = await _apply_on(conn, decisions[i], None)
        except asyncpg.DeadlockDetectedError as exc:
            raise CasMiss("deadlock with another writer; nothing was written") from exc
        return [applied[i] for i in range(len(decisions))]


class PostgresTx:
    """The store's operations inside one open transaction (see PostgresWriter.transaction)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        return await load_on(self.conn, run_id, attempt_id, dedupe_key)

    async def load_runs(self, run_ids: Sequence[str]) -> dict[str, Loaded]:
        rows = await self.conn.fetch(LOAD_RUNS, list(run_ids))
        return {row["id"]: Loaded(run_from_row(row), attempt_from_row(row, "a_")) for row in rows}

    async def apply(self, decision: Decision, dedupe_key: str | None = None) -> Applied:
        """A miss raises and aborts the whole transaction: batches are all-or-nothing."""
        return await _apply_on(self.conn, decision, dedupe_key)

    async def apply_many(self, decisions: Sequence[Decision]) -> list[Applied]:
        """The batchable ones (run and attempt updates) in one statement, in attempt-id
        order as apply_all writes them; the rest one by one."""
        order = sorted(range(len(decisions)), key=lambda i: _lock_order(decisions[i]))
        together = [i for i in order if batchable(decisions[i])]
        applied: dict[int, Applied] = {}
        if together:
            written = await apply_batch(self.conn, [decisions[i] for i in together])
            applied.update(zip(together, written, strict=True))
        for i in order:
            if i not in applied:
                applied[i] = await _apply_on(self.conn, decisions[i], None)
        return [applied[i] for i in range(len(decisions))]

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return list(await self.conn.fetch(sql, *args))

    async def open_runs_in_scope(self, scope: str) -> list[str]:
        return [row[0] for row in await self.conn.fetch(OPEN_IN_SCOPE, scope, TERMINAL_STATUSES)]

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None:
        row = await self.conn.fetchrow(FIND_BY_KEY, project_id, key)
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"))

    async def put_request(self, record: RequestRecord, snapshot: dict[str, Any]) -> None:
        with _translated_errors():
            await self.conn.execute(
                PUT_REQUEST,
                record.request_id,
                record.method,
                record.payload_hash,
                encode(snapshot),
                now_ms(),
            )

    async def lock(self, lock_keys: Sequence[str]) -> None:
        """More transaction-scoped locks; callers keep one global order (owner, instance,
        agents sorted, scopes sorted), so two transactions can never wait on each other."""
        await PostgresWriter._lock(self.conn, lock_keys)

    async def lock_scan(
        self, scan: Scan, mark_ms: int, skip: Sequence[str], limit: int
    ) -> Sequence[Attempt]:
        """SKIP LOCKED: a row another replica is acting on is left to it, never waited for."""
        rows = await self.conn.fetch(SCANS[scan], mark_ms, list(skip), limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]


def _lock_order(decision: Decision) -> str:
    return decision.attempt.id if decision.attempt is not None else decision.run.id


async def _apply_on(
    conn: asyncpg.Connection, decision: Decision, dedupe_key: str | None
) -> Applied:
    sql, placeholders = STATEMENTS[(decision.run_write, decision.attempt_write)]
    values = parameters(decision, dedupe_key)
    if decision.grant is None:
        with _translated_errors():
            rows = await conn.fetch(sql, *placeholders.bind(values))
        return _applied(decision, values, dedupe_key, rows)
    # the grant's row beside the run's write, one transaction (a savepoint in a caller's)
    with _translated_errors():
        async with conn.transaction():
            rows = await conn.fetch(sql, *placeholders.bind(values))
            applied = _applied(decision, values, dedupe_key, rows)
            await conn.execute(PUT_GRANT, *grant_values(decision.run.id, decision.grant))
    return applied


@contextlib.contextmanager
def _translated_errors() -> Iterator[None]:
    try:
        yield
    except asyncpg.DivisionByZeroError as exc:
        raise CasMiss("attempt compare-and-set missed") from exc
    except asyncpg.UniqueViolationError as exc:
        constraint = exc.constraint_name or ""
        if "dedupe" in constraint:
            raise DedupeKeyTaken(constraint) from exc
        if "idempotency" in constraint:
            raise IdempotencyKeyTaken(constraint) from exc
        if constraint == "pk_request_log":
            raise RequestIdTaken(constraint) from exc
        if constraint == "pk_run_approvals":
            raise GrantTaken(constraint) from exc
        raise


def parameters(decision: Decision, dedupe_key: str | None) -> dict[str, Any]:
    """The values a decision's statement binds, by placeholder name (STATEMENTS)."""
    values: dict[str, Any] = {"run_id": decision.run.id, "dedupe": dedupe_key}
    values.update(events_from_decision(decision))
    if decision.run_write is RunWrite.INSERT:
        values.update({"r_" + k: v for k, v in run_values(decision.run).items()})
    elif decision.run_write is RunWrite.UPDATE:
        values["expected_version"] = decision.expected_version
        mutable = run_mutable_values(decision.run)
        values.update({"r_" + c: v for c, v in zip(RUN_MUTABLE, mutable, strict=True)})
    attempt = decision.attempt
    if decision.attempt_write is AttemptWrite.UPDATE and attempt is not None:
        row = attempt_values(attempt)
        values.update({"a_" + c: row[c] for c in ATTEMPT_MUTABLE})
        values["a_lease_written"] = decision.lease_written
        values["a_key"] = attempt.id
        values["a_expected_status"] = (
            decision.attempt_expected_status.value if decision.attempt_expected_status else None
        )
        values["a_expected_seq"] = decision.attempt_expected_seq
        columns = list(zip(*output_rows(decision.output, 0), strict=True)) or [()] * 5
        for i in range(4):
            values[f"o{i + 1}"] = list(columns[i])
    elif decision.attempt_write is AttemptWrite.INSERT and attempt is not None:
        values.update({"i_" + k: v for k, v in attempt_values(attempt).items()})
    return values


def _applied(
    decision: Decision, values: dict[str, Any], dedupe_key: str | None, rows: Sequence[Any]
) -> Applied:
    if not rows:
        raise CasMiss(f"run {decision.run.id} moved past version {decision.expected_version}")
    sequence = rows[0]["event_sequence"]
    run = decision.run
    if run.event_sequence != sequence:
        run = replace(run, event_sequence=sequence)
    events = stored_events(decision, values, sequence, dedupe_key)
    return Applied(run=run, attempt=decision.attempt, events=events)
