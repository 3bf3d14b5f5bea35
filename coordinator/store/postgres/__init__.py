"""PostgreSQL backend on the asyncpg driver.

A transition is one round trip: compare-and-set of the run, the attempt write and the event
append form one data-modifying CTE, so they commit together or not at all. Statements are
built once at import and prepared once per connection (the driver caches them); connections
run with ``plan_cache_mode=force_generic_plan`` so prepared CTEs do not stick to custom plans.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from typing import Any

import asyncpg

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
from coordinator.store.postgres.batch import apply_batch, batchable
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
    EVENT_TX_ID,
    TERMINAL_STATUSES,
    Placeholders,
    events_from_decision,
    queue_position_sql,
    scan_sql,
    stored_events,
)
from kernel.ids import now_ms

_RUN_SELECT = ", ".join(f"r.{c}" for c in RUN_COLUMNS)
_ATTEMPT_SELECT = ", ".join(f"a.{c} AS a_{c}" for c in ATTEMPT_COLUMNS)

LOAD = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT},
       ($3::text IS NOT NULL AND EXISTS (
           SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.dedupe_key = $3)) AS dedupe_hit
FROM runs r
LEFT JOIN attempts a ON a.id = COALESCE($2::text, r.current_attempt_id) AND a.run_id = r.id
WHERE r.id = $1
"""

_LOAD_ATTEMPTS = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}
FROM attempts a JOIN runs r ON r.id = a.run_id
WHERE a.id = ANY($1::text[])"""

_OUTPUT_READ = read_sql(lambda n: "$" + n)
_OUTPUT_DELETE = delete_sql(lambda n: "$" + n)

_EVENT_ARRAYS = (
    "unnest($E1::text[], $E2::text[], $E3::text[], $E4::text[], $E5::text[], $E6::text[])"
    " WITH ORDINALITY AS ev(id, type, actor_type, actor_id, attempt_id, payload, ord)"
)


def _events_insert(p: Placeholders, source: str) -> str:
    arrays = _EVENT_ARRAYS
    for i in range(1, 7):
        arrays = arrays.replace(f"$E{i}", p.next(f"ev{i}"))
    dedupe, created, count = p.next("dedupe"), p.next("created"), p.next("n_events")
    return f"""
INSERT INTO run_events ({", ".join(EVENT_COLUMNS)}, tx_id)
SELECT ev.id, src.id, src.event_sequence - {count}::bigint + ev.ord, ev.type,
       CASE WHEN ev.ord = 1 THEN {dedupe}::text END, ev.actor_type, ev.actor_id, ev.attempt_id,
       ev.payload, {created}::bigint, src.project_id, {EVENT_TX_ID}
FROM {source} src CROSS JOIN {arrays}
LEFT JOIN run_events prev
  ON prev.run_id = src.id AND prev.sequence = src.event_sequence - {count}::bigint
ORDER BY ev.ord"""


def _build_update(attempt_write: AttemptWrite | None) -> tuple[str, Placeholders]:
    p = Placeholders()
    (
        run_id,
        expected,
    ) = p.next("run_id"), p.next("expected_version")
    sets = ", ".join(f"{c} = {p.next('r_' + c)}" for c in RUN_MUTABLE)
    n_events = p.peek("n_events")
    parts = [
        f"""r AS (
UPDATE runs SET {sets}, event_sequence = runs.event_sequence + {n_events}::bigint
WHERE id = {run_id} AND version = {expected}
RETURNING id, event_sequence, project_id)"""
    ]
    guard = ""
    if attempt_write is AttemptWrite.UPDATE:
        a_sets = attempt_set_clause(
            lambda c: p.next("a_" + c), p.next("a_lease_written") + "::boolean"
        )
        a_id, a_status, a_seq = (
            p.next("a_key"),
            p.next("a_expected_status"),
            p.next("a_expected_seq"),
        )
        parts.append(
            f"""a AS (
UPDATE attempts SET {a_sets}
WHERE id = {a_id} AND status = {a_status} AND last_event_seq = {a_seq}
  AND EXISTS (SELECT 1 FROM r)
RETURNING id)"""
        )
        # The attempt's new output pieces, only if its compare-and-set matched.
        o1, o2, o3, o4 = (p.next(f"o{i}") for i in range(1, 5))
        parts.append(
            f"""o AS (
INSERT INTO attempt_output ({", ".join(OUTPUT_COLUMNS)})
SELECT o.attempt_id, o.byte_offset, o.kind, o.text, {p.next("created")}::bigint
FROM unnest({o1}::text[], {o2}::bigint[], {o3}::text[], {o4}::text[])
     AS o(attempt_id, byte_offset, kind, text)
JOIN a ON a.id = o.attempt_id)"""
        )
        # When the run CAS won but the attempt CAS missed, dividing by zero aborts the whole
        # statement, so the run, the attempt and the events commit together or not at all.
        guard = ", 1 / (SELECT count(*)::int FROM a) AS attempt_guard"
    elif attempt_write is AttemptWrite.INSERT:
        cols = ", ".join(ATTEMPT_COLUMNS)
        vals = ", ".join(p.next("i_" + c) for c in ATTEMPT_COLUMNS)
        parts.append(f"ai AS (INSERT INTO attempts ({cols}) SELECT {vals} FROM r RETURNING id)")
    parts.append(f"e AS ({_events_insert(p, 'r')})")
    sql = "WITH " + ",\n".join(parts) + f"\nSELECT r.event_sequence{guard} FROM r"
    return sql, p


def _build_insert(with_attempt: bool) -> tuple[str, Placeholders]:
    p = Placeholders()
    cols = ", ".join(RUN_COLUMNS)
    vals = ", ".join(
        p.next("r_" + c) if c != "event_sequence" else p.peek("n_events") + "::bigint"
        for c in RUN_COLUMNS
    )
    parts = [
        f"r AS (INSERT INTO runs ({cols}) VALUES ({vals}) RETURNING id, event_sequence, project_id)"
    ]
    if with_attempt:
        a_cols = ", ".join(ATTEMPT_COLUMNS)
        a_vals = ", ".join(p.next("i_" + c) for c in ATTEMPT_COLUMNS)
        parts.append(f"ai AS (INSERT INTO attempts ({a_cols}) SELECT {a_vals} FROM r RETURNING id)")
    parts.append(f"e AS ({_events_insert(p, 'r')})")
    sql = "WITH " + ",\n".join(parts) + "\nSELECT r.event_sequence FROM r"
    return sql, p


def _build_events_only() -> tuple[str, Placeholders]:
    p = Placeholders()
    run_id = p.next("run_id")
    n_events = p.peek("n_events")
    sql = f"""WITH r AS (
UPDATE runs SET event_sequence = event_sequence + {n_events}::bigint WHERE id = {run_id}
RETURNING id, event_sequence, project_id),
e AS ({_events_insert(p, "r")})
SELECT r.event_sequence FROM r"""
    return sql, p


_STATEMENTS: dict[tuple[RunWrite, AttemptWrite | None], tuple[str, Placeholders]] = {
    (RunWrite.UPDATE, None): _build_update(None),
    (RunWrite.UPDATE, AttemptWrite.UPDATE): _build_update(AttemptWrite.UPDATE),
    (RunWrite.UPDATE, AttemptWrite.INSERT): _build_update(AttemptWrite.INSERT),
    (RunWrite.INSERT, None): _build_insert(False),
    (RunWrite.INSERT, AttemptWrite.INSERT): _build_insert(True),
    (RunWrite.EVENTS_ONLY, None): _build_events_only(),
}

_FIND_BY_KEY = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}, false AS dedupe_hit
FROM runs r LEFT JOIN attempts a ON a.id = r.current_attempt_id
WHERE r.project_id = $1 AND r.idempotency_key = $2"""
_LIST_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE run_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3"""
# pg_snapshot_xmin: every transaction with a smaller id has finished, so every event below it
# that will ever commit has (docs/events.md). The row comparison walks the cursor index.
_STABLE = "tx_id < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
_PROJECT_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE project_id = $1 AND (tx_id, position) > ($2, $3) AND {_STABLE}
ORDER BY tx_id, position LIMIT $4"""
_ALL_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE (tx_id, position) > ($1, $2) AND {_STABLE}
ORDER BY tx_id, position LIMIT $3"""
_LAST_EVENT_CURSOR = f"""
SELECT tx_id, position FROM run_events WHERE {_STABLE}
ORDER BY tx_id DESC, position DESC LIMIT 1"""
_LIST_ATTEMPTS = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE run_id = $1 ORDER BY attempt_no"
)
_EXPIRED_LEASES = f"""
SELECT {", ".join(ATTEMPT_COLUMNS)} FROM attempts
WHERE status IN ('claimed', 'starting', 'running') AND lease_expires_at_ms < $1
  AND sync_state <> 'stale'
ORDER BY lease_expires_at_ms, id LIMIT $2"""
_SILENT_UNKNOWNS = f"""
SELECT {", ".join(ATTEMPT_COLUMNS)} FROM attempts
WHERE status IN ('starting', 'running') AND sync_state = 'stale' AND lease_expires_at_ms < $1
ORDER BY lease_expires_at_ms, id LIMIT $2"""
_OLDEST_NON_TERMINAL = """
SELECT status, min(updated_at_ms) FROM runs WHERE status <> ALL($1::text[]) GROUP BY status"""
_DUE_RETRIES = """
SELECT id FROM runs WHERE status = 'retry_wait' AND updated_at_ms < $1
ORDER BY updated_at_ms, id LIMIT $2"""
# Rows locked in id order, as apply_all locks them, so a renewal and a batch never deadlock.
_RENEW_LEASES = """
UPDATE attempts SET heartbeat_at_ms = $3, lease_expires_at_ms = GREATEST(lease_expires_at_ms, $4),
    callback_token_expires_at_ms = GREATEST(callback_token_expires_at_ms, $6)
WHERE id IN (
    SELECT id FROM attempts
    WHERE id = ANY($5::text[]) AND owner_id = $1 AND runtime_instance_id = $2
        AND status IN ('starting', 'running')
    ORDER BY id FOR UPDATE)"""
_STARTED_ATTEMPTS = f"""
SELECT {", ".join(ATTEMPT_COLUMNS)} FROM attempts
WHERE owner_id = $1 AND runtime_instance_id = $2 AND status IN ('starting', 'running')"""
_BIND_INSTANCE = """
WITH bound AS (
    INSERT INTO runtime_bindings (runtime_instance_id, owner_id, bound_at_ms)
    VALUES ($1, $2, $3) ON CONFLICT (runtime_instance_id) DO NOTHING RETURNING owner_id)
SELECT owner_id FROM bound
UNION ALL SELECT owner_id FROM runtime_bindings WHERE runtime_instance_id = $1
LIMIT 1"""
_RECORD_LINEAGE = """
INSERT INTO runtime_instances
    (owner_id, runtime_instance_id, lineage, first_hello_at_ms, last_hello_at_ms)
VALUES ($1, $2, $3, $4, $4)
ON CONFLICT (owner_id, runtime_instance_id)
DO UPDATE SET lineage = EXCLUDED.lineage, last_hello_at_ms = EXCLUDED.last_hello_at_ms
RETURNING first_hello_at_ms"""
_EARLIER_IN_LINEAGE = """
SELECT runtime_instance_id FROM runtime_instances
WHERE owner_id = $1 AND lineage = $2 AND replaced_at_ms IS NULL
  AND (first_hello_at_ms, runtime_instance_id) < ($3, $4)
ORDER BY first_hello_at_ms, runtime_instance_id"""
_MARK_REPLACED = (
    "UPDATE runtime_instances SET replaced_at_ms = $3"
    " WHERE owner_id = $1 AND runtime_instance_id = $2 AND replaced_at_ms IS NULL"
)
_GET_REQUEST = "SELECT method, payload_hash, response FROM request_log WHERE request_id = $1"
_PUT_REQUEST = (
    "INSERT INTO request_log (request_id, method, payload_hash, response, created_at_ms)"
    " VALUES ($1, $2, $3, $4, $5)"
)
_QUEUE_POSITION = queue_position_sql("$1", "$2", "$3", "$4", "$5", "$6")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Replaces asyncpg's default reset on release (unlock all, CLOSE ALL, UNLISTEN, RESET
    ALL): two extra round trips per transition, and RESET ALL would drop the plan cache mode.
    Nothing session-scoped is left behind here: locks are transaction-scoped and asyncpg
    still rolls back a transaction left open."""


class PostgresStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool

    @classmethod
    async def connect(cls, dsn: str, min_size: int = 2, max_size: int = 20) -> PostgresStore:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            server_settings={"plan_cache_mode": "force_generic_plan"},
            reset=_keep_session,
            statement_cache_size=256,
        )
        return cls(pool)

    async def close(self) -> None:
        await self._pool.close()

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        return await _load_on(self._pool, run_id, attempt_id, dedupe_key)

    async def apply(
        self, decision: Decision, dedupe_key: str | None, request: RequestRecord | None
    ) -> Applied:
        async with self._pool.acquire() as conn:
            if request is None:
                return await _apply_on(conn, decision, dedupe_key)
            with _translated_errors():
                async with conn.transaction():
                    applied = await _apply_on(conn, decision, dedupe_key)
                    await conn.execute(
                        _PUT_REQUEST,
                        request.request_id,
                        request.method,
                        request.payload_hash,
                        request.render(applied),
                        decision.run.updated_at_ms,
                    )
                    return applied

    @contextlib.asynccontextmanager
    async def transaction(self, lock_keys: Sequence[str]) -> AsyncIterator[PostgresTx]:
        """One transaction holding transaction-scoped advisory locks, taken in the given order."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self._lock(conn, lock_keys)
            yield PostgresTx(conn)

    @staticmethod
    async def _lock(conn: asyncpg.Connection, lock_keys: Sequence[str]) -> None:
        if lock_keys:  # one round trip, the locks still taken in the given order
            await conn.execute(_ADVISORY_LOCKS, list(lock_keys))

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None:
        row = await self._pool.fetchrow(_FIND_BY_KEY, project_id, key)
        if row is None:
            return None
        return Loaded(run_from_row(row), attempt_from_row(row, "a_"))

    async def get_request(self, request_id: str) -> StoredRequest | None:
        row = await self._pool.fetchrow(_GET_REQUEST, request_id)
        if row is None:
            return None
        return StoredRequest(row["method"], row["payload_hash"], bytes(row["response"]))

    async def list_runs(
        self, run_filter: RunFilter, after: RunCursor | None, limit: int
    ) -> Sequence[Loaded]:
        clauses, args = _filter_clauses(run_filter, after)
        args.append(limit)
        sql = (
            f"SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}, false AS dedupe_hit FROM runs r "
            "LEFT JOIN attempts a ON a.id = r.current_attempt_id "
            f"{('WHERE ' + ' AND '.join(clauses)) if clauses else ''} "
            f"ORDER BY r.created_at_ms DESC, r.id DESC LIMIT ${len(args)}"
        )
        rows = await self._pool.fetch(sql, *args)
        return [Loaded(run_from_row(row), attempt_from_row(row, "a_")) for row in rows]

    async def list_events(self, run_id: str, after_sequence: int, limit: int) -> Sequence[RunEvent]:
        rows = await self._pool.fetch(_LIST_EVENTS, run_id, after_sequence, limit)
        return [event_from_row(row) for row in rows]

    async def list_project_events(
        self, project_id: str | None, after: EventCursor | None, limit: int
    ) -> Sequence[RunEvent]:
        tx_id, position = (after.tx_id, after.position) if after else (-1, -1)
        if project_id is None:
            rows = await self._pool.fetch(_ALL_EVENTS, tx_id, position, limit)
        else:
            rows = await self._pool.fetch(_PROJECT_EVENTS, project_id, tx_id, position, limit)
        return [event_from_row(row) for row in rows]

    async def last_event_cursor(self) -> EventCursor | None:
        row = await self._pool.fetchrow(_LAST_EVENT_CURSOR)
        return EventCursor(row["tx_id"], row["position"]) if row else None

    async def list_attempts(self, run_id: str) -> Sequence[Attempt]:
        rows = await self._pool.fetch(_LIST_ATTEMPTS, run_id)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def read_output(self, attempt_id: str, offset: int, limit: int) -> Sequence[Stored]:
        rows = await self._pool.fetch(_OUTPUT_READ, attempt_id, offset, limit)
        return [stored_from_row(attempt_id, row) for row in rows]

    async def delete_output(self, finished_before_ms: int, limit: int) -> int:
        status = await self._pool.execute(_OUTPUT_DELETE, finished_before_ms, limit)
        return int(status.split()[-1])

    async def load_attempts(self, attempt_ids: Sequence[str]) -> dict[str, Loaded]:
        rows = await self._pool.fetch(_LOAD_ATTEMPTS, list(attempt_ids))
        return {row["a_id"]: Loaded(run_from_row(row), attempt_from_row(row, "a_")) for row in rows}

    async def apply_all(self, decisions: Sequence[Decision]) -> list[Applied]:
        """In attempt-id order (as renew_leases locks them), answered in the given order."""
        order = sorted(range(len(decisions)), key=lambda i: _lock_order(decisions[i]))
        together = [i for i in order if batchable(decisions[i])]
        alone = [i for i in order if not batchable(decisions[i])]
        applied: dict[int, Applied] = {}
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                if together:
                    written = await apply_batch(conn, [decisions[i] for i in together])
                    applied.update(zip(together, written, strict=True))
                for i in alone:
                    applied[i] = await _apply_on(conn, decisions[i], None)
        except asyncpg.DeadlockDetectedError as exc:
            raise CasMiss("deadlock with another writer; nothing was written") from exc
        return [applied[i] for i in range(len(decisions))]

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
        status = await self._pool.execute(
            _RENEW_LEASES,
            owner_id,
            runtime_instance_id,
            now_ms,
            until_ms,
            list(attempt_ids),
            token_until_ms,
        )
        return int(status.split()[-1])

    async def expired_leases(self, now_ms: int, limit: int) -> Sequence[Attempt]:
        rows = await self._pool.fetch(_EXPIRED_LEASES, now_ms, limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def silent_unknowns(self, silent_since_ms: int, limit: int) -> Sequence[Attempt]:
        rows = await self._pool.fetch(_SILENT_UNKNOWNS, silent_since_ms, limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def oldest_non_terminal(self) -> dict[str, int]:
        rows = await self._pool.fetch(_OLDEST_NON_TERMINAL, TERMINAL_STATUSES)
        return {row[0]: int(row[1]) for row in rows}

    async def due_retries(self, updated_before_ms: int, limit: int) -> Sequence[str]:
        rows = await self._pool.fetch(_DUE_RETRIES, updated_before_ms, limit)
        return [row[0] for row in rows]

    async def started_attempts(self, owner_id: str, runtime_instance_id: str) -> Sequence[Attempt]:
        rows = await self._pool.fetch(_STARTED_ATTEMPTS, owner_id, runtime_instance_id)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]

    async def record_lineage(
        self, owner_id: str, runtime_instance_id: str, lineage: str, now_ms: int
    ) -> Sequence[str]:
        async with self._pool.acquire() as conn, conn.transaction():
            first = await conn.fetchval(
                _RECORD_LINEAGE, owner_id, runtime_instance_id, lineage, now_ms
            )
            rows = await conn.fetch(
                _EARLIER_IN_LINEAGE, owner_id, lineage, first, runtime_instance_id
            )
        return [row[0] for row in rows]

    async def bind_instance(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> str:
        return str(await self._pool.fetchval(_BIND_INSTANCE, runtime_instance_id, owner_id, now_ms))

    async def mark_replaced(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> None:
        await self._pool.execute(_MARK_REPLACED, owner_id, runtime_instance_id, now_ms)

    async def queue_position(self, run: Run) -> int:
        if run.queued_at_ms is None or run.status.value != "queued":
            return 0
        value = await self._pool.fetchval(
            _QUEUE_POSITION,
            run.owner_id,
            int(run.run_now),
            run.priority,
            run.queued_at_ms,
            run.id,
            run.project_id,
        )
        return int(value or 0)


_OPEN_IN_SCOPE = (
    "SELECT id FROM runs WHERE execution_scope = $1 AND status <> ALL($2::text[])"
    " ORDER BY created_at_ms, id"
)
_ADVISORY_LOCKS = """
SELECT pg_advisory_xact_lock(hashtextextended(key, 0))
FROM unnest($1::text[]) WITH ORDINALITY AS k(key, n) ORDER BY n"""


_SCANS = {
    scan: scan_sql(scan, "$1", "a.id <> ALL($2::text[])", "$3", "FOR UPDATE OF a, r SKIP LOCKED")
    for scan in Scan
}


class PostgresTx:
    """The store's operations inside one open transaction (see PostgresStore.transaction)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        return await _load_on(self.conn, run_id, attempt_id, dedupe_key)

    async def apply(self, decision: Decision, dedupe_key: str | None = None) -> Applied:
        """A miss raises and aborts the whole transaction: batches are all-or-nothing."""
        return await _apply_on(self.conn, decision, dedupe_key)

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return list(await self.conn.fetch(sql, *args))

    async def open_runs_in_scope(self, scope: str) -> list[str]:
        return [row[0] for row in await self.conn.fetch(_OPEN_IN_SCOPE, scope, TERMINAL_STATUSES)]

    async def put_request(self, record: RequestRecord, committed: Any) -> None:
        with _translated_errors():
            await self.conn.execute(
                _PUT_REQUEST,
                record.request_id,
                record.method,
                record.payload_hash,
                record.render(committed),
                now_ms(),
            )

    async def lock(self, lock_keys: Sequence[str]) -> None:
        """More transaction-scoped locks; callers keep one global order (owner, instance,
        agents sorted, scopes sorted), so two transactions can never wait on each other."""
        await PostgresStore._lock(self.conn, lock_keys)

    async def lock_scan(
        self, scan: Scan, mark_ms: int, skip: Sequence[str], limit: int
    ) -> Sequence[Attempt]:
        """SKIP LOCKED: a row another replica is acting on is left to it, never waited for."""
        rows = await self.conn.fetch(_SCANS[scan], mark_ms, list(skip), limit)
        return [a for row in rows if (a := attempt_from_row(row)) is not None]


def _lock_order(decision: Decision) -> str:
    return decision.attempt.id if decision.attempt is not None else decision.run.id


async def _load_on(
    executor: Any, run_id: str, attempt_id: str | None, dedupe_key: str | None
) -> Loaded | None:
    row = await executor.fetchrow(LOAD, run_id, attempt_id, dedupe_key)
    if row is None:
        return None
    return Loaded(run_from_row(row), attempt_from_row(row, "a_"), row["dedupe_hit"])


async def _apply_on(
    conn: asyncpg.Connection, decision: Decision, dedupe_key: str | None
) -> Applied:
    sql, placeholders = _STATEMENTS[(decision.run_write, decision.attempt_write)]
    values = _parameters(decision, dedupe_key)
    with _translated_errors():
        rows = await conn.fetch(sql, *placeholders.bind(values))
    return _applied(decision, values, dedupe_key, rows)


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
        raise


def _filter_clauses(run_filter: RunFilter, after: RunCursor | None) -> tuple[list[str], list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []

    def add(template: str, value: Any) -> None:
        args.append(value)
        clauses.append(template.replace("?", f"${len(args)}"))

    if run_filter.project_id:
        add("r.project_id = ?", run_filter.project_id)
    if run_filter.owner_id:
        add("r.owner_id = ?", run_filter.owner_id)
    if run_filter.agent_id:
        add("r.agent_id = ?", run_filter.agent_id)
    if run_filter.statuses:
        add("r.status = ANY(?::text[])", sorted(s.value for s in run_filter.statuses))
    if after is not None:
        args.append(after.created_at_ms)
        args.append(after.run_id)
        n = len(args)
        clauses.append(f"(r.created_at_ms, r.id) < (${n - 1}, ${n})")
    return clauses, args


def _parameters(decision: Decision, dedupe_key: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {"run_id": decision.run.id, "dedupe": dedupe_key}
    values.update(events_from_decision(decision))
    if decision.run_write is RunWrite.INSERT:
        values.update({"r_" + k: v for k, v in run_values(decision.run).items()})
    elif decision.run_write is RunWrite.UPDATE:
        values["expected_version"] = decision.expected_version
        run_row = run_values(decision.run)
        values.update({"r_" + c: run_row[c] for c in RUN_MUTABLE})
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
