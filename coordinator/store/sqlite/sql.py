"""Every statement of the SQLite store, its text kept together (as procrastinate keeps
``sql/queries.sql``): the constants the reader, the lease book and the writer run, and the
builders of those whose placeholders depend on the arguments (SQLite has no arrays).
Dialect-neutral pieces are in coordinator/store/sql.py and output_sql.py.
"""

from __future__ import annotations

from typing import Any

from coordinator.store.base import TEXT_COLUMNS, RunCursor, RunFilter, Scan
from coordinator.store.output_sql import OUTPUT_COLUMNS, delete_sql, read_sql
from coordinator.store.rows import (
    ATTEMPT_COLUMNS,
    EVENT_COLUMNS,
    EVENT_READ_COLUMNS,
    RUN_COLUMNS,
    RUN_MUTABLE,
    attempt_set_clause,
)
from coordinator.store.sql import TERMINAL_STATUSES, insert_sql, queue_position_sql, scan_sql

_RUN_SELECT = ", ".join(f"r.{c}" for c in RUN_COLUMNS)
_ATTEMPT_SELECT = ", ".join(f"a.{c} AS a_{c}" for c in ATTEMPT_COLUMNS)
LOAD = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT},
       (:dedupe IS NOT NULL AND EXISTS (
           SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.dedupe_key = :dedupe))
           AS dedupe_hit
FROM runs r
LEFT JOIN attempts a ON a.id = COALESCE(:attempt_id, r.current_attempt_id) AND a.run_id = r.id
WHERE r.id = :run_id"""
RUN_UPDATE = (
    f"UPDATE runs SET {', '.join(f'{c} = :{c}' for c in RUN_MUTABLE)}, "
    "event_sequence = event_sequence + :n_events "
    "WHERE id = :id AND version = :expected_version RETURNING event_sequence"
)
EVENTS_ONLY = (
    "UPDATE runs SET event_sequence = event_sequence + :n_events WHERE id = :id "
    "RETURNING event_sequence"
)
RUN_INSERT = (
    f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in RUN_COLUMNS)})"
)
ATTEMPT_UPDATE = (
    f"UPDATE attempts SET {attempt_set_clause(lambda c: ':' + c, ':lease_written')} "
    "WHERE id = :id AND status = :expected_status AND last_event_seq = :expected_seq"
)
ATTEMPT_INSERT = (
    f"INSERT INTO attempts ({', '.join(ATTEMPT_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in ATTEMPT_COLUMNS)})"
)
# One writer commits transactions one after another, so numbering events as they are inserted
# is numbering them in commit order; tx_id stays 0 (docs/events.md).
EVENT_INSERT = (
    f"INSERT INTO run_events ({', '.join(EVENT_COLUMNS)}, position) "
    f"VALUES ({', '.join(':' + c for c in EVENT_COLUMNS)}, "
    "(SELECT COALESCE(MAX(position), 0) + 1 FROM run_events WHERE tx_id = 0))"
)
OUTPUT_INSERT = f"INSERT INTO attempt_output ({', '.join(OUTPUT_COLUMNS)}) VALUES (?, ?, ?, ?, ?)"
OUTPUT_READ = read_sql(lambda n: "?" + n)
OUTPUT_DELETE = delete_sql(lambda n: "?" + n)
FIND_BY_KEY = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}, 0 AS dedupe_hit
FROM runs r LEFT JOIN attempts a ON a.id = r.current_attempt_id
WHERE r.project_id = ? AND r.idempotency_key = ?"""
LIST_EVENTS = (
    f"SELECT {', '.join(EVENT_READ_COLUMNS)} FROM run_events WHERE run_id = ? AND sequence > ? "
    "ORDER BY sequence LIMIT ?"
)
# The reader sees committed transactions only, and the one writer numbered their events in
# commit order, so everything it sees is stable (docs/events.md).
PROJECT_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE project_id = ? AND (tx_id, position) > (?, ?)
ORDER BY tx_id, position LIMIT ?"""
ALL_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE (tx_id, position) > (?, ?)
ORDER BY tx_id, position LIMIT ?"""
LAST_EVENT_CURSOR = (
    "SELECT tx_id, position FROM run_events ORDER BY tx_id DESC, position DESC LIMIT 1"
)
LIST_ATTEMPTS = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE run_id = ? ORDER BY attempt_no"
)
QUEUE_POSITION = queue_position_sql("?1", "?2", "?3", "?4", "?5", "?6")
RECORD_LINEAGE = """
INSERT INTO runtime_instances
    (owner_id, runtime_instance_id, lineage, first_hello_at_ms, last_hello_at_ms)
VALUES (?1, ?2, ?3, ?4, ?4)
ON CONFLICT (owner_id, runtime_instance_id)
DO UPDATE SET lineage = excluded.lineage, last_hello_at_ms = excluded.last_hello_at_ms
RETURNING first_hello_at_ms"""
EARLIER_IN_LINEAGE = """
SELECT runtime_instance_id FROM runtime_instances
WHERE owner_id = ?1 AND lineage = ?2 AND replaced_at_ms IS NULL
  AND (first_hello_at_ms, runtime_instance_id) < (?3, ?4)
ORDER BY first_hello_at_ms, runtime_instance_id"""
BIND_INSTANCE = (
    "INSERT INTO runtime_bindings (runtime_instance_id, owner_id, bound_at_ms)"
    " VALUES (?1, ?2, ?3) ON CONFLICT (runtime_instance_id) DO NOTHING"
)
BOUND_OWNER = "SELECT owner_id FROM runtime_bindings WHERE runtime_instance_id = ?1"
MARK_REPLACED = (
    "UPDATE runtime_instances SET replaced_at_ms = ?1"
    " WHERE owner_id = ?2 AND runtime_instance_id = ?3 AND replaced_at_ms IS NULL"
)
_TERMINAL_MARKS = ", ".join("?" for _ in TERMINAL_STATUSES)  # bound to TERMINAL_STATUSES
GET_REQUEST = "SELECT method, payload_hash, response FROM request_log WHERE request_id = ?"
PUT_REQUEST = insert_sql("request_log", lambda n: f"?{n}")
PUT_GRANT = insert_sql("run_approvals", lambda n: f"?{n}")
EXPIRED_LEASES = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE status IN "
    "('claimed', 'starting', 'running') AND lease_expires_at_ms < ? AND "
    "sync_state <> 'stale' ORDER BY lease_expires_at_ms, id LIMIT ?"
)
SILENT_UNKNOWNS = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE status IN "
    "('starting', 'running') AND sync_state = 'stale' AND lease_expires_at_ms < ? "
    "ORDER BY lease_expires_at_ms, id LIMIT ?"
)
OLDEST_NON_TERMINAL = (
    f"SELECT status, min(updated_at_ms) FROM runs WHERE status NOT IN ({_TERMINAL_MARKS}) "
    "GROUP BY status"
)
QUEUED_BY_PROJECT = (
    "SELECT project_id, count(*), min(queued_at_ms) FROM runs WHERE status = 'queued' "
    "GROUP BY project_id"
)
DUE_RETRIES = (
    "SELECT id FROM runs WHERE status = 'retry_wait' AND updated_at_ms < ? "
    "ORDER BY updated_at_ms, id LIMIT ?"
)
STARTED_ATTEMPTS = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE owner_id = ? AND "
    "runtime_instance_id = ? AND status IN ('starting', 'running')"
)
OPEN_IN_SCOPE = (
    f"SELECT id FROM runs WHERE execution_scope = ? AND status NOT IN ({_TERMINAL_MARKS})"
    " ORDER BY created_at_ms, id"
)


def _marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


def renew_leases_sql(n_attempts: int) -> str:
    """Parameters: now, until, token until, owner, instance, then the ``n_attempts`` ids."""
    return (
        "UPDATE attempts SET heartbeat_at_ms = ?, lease_expires_at_ms = "
        "max(coalesce(lease_expires_at_ms, 0), ?), callback_token_expires_at_ms = "
        "max(callback_token_expires_at_ms, ?) WHERE owner_id = ? AND "
        "runtime_instance_id = ? AND status IN ('starting', 'running') AND "
        f"id IN ({_marks(n_attempts)})"
    )


def load_runs_sql(n_runs: int) -> str:
    return (
        f"SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT} FROM runs r LEFT JOIN attempts a "
        f"ON a.id = r.current_attempt_id AND a.run_id = r.id WHERE r.id IN ({_marks(n_runs)})"
    )


def load_attempts_sql(n_attempts: int) -> str:
    return (
        f"SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT} FROM attempts a "
        f"JOIN runs r ON r.id = a.run_id WHERE a.id IN ({_marks(n_attempts)})"
    )


def lock_scan_sql(scan: Scan, n_skip: int) -> str:
    """Parameters: the mark, the ``n_skip`` ids left out, the limit. No row locks: the
    IMMEDIATE transaction already excludes every other writer."""
    where = f"a.id NOT IN ({_marks(n_skip)})" if n_skip else "1 = 1"
    return scan_sql(scan, "?", where, "?", "")


def list_runs_sql(
    run_filter: RunFilter, after: RunCursor | None, limit: int
) -> tuple[str, list[Any]]:
    """The newest-first listing's statement and its arguments."""
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
    if run_filter.task_id:
        clauses.append("r.task_id = ?")
        args.append(run_filter.task_id)
    if run_filter.created_from_ms is not None:
        clauses.append("r.created_at_ms >= ?")
        args.append(run_filter.created_from_ms)
    if run_filter.created_to_ms is not None:
        clauses.append("r.created_at_ms < ?")
        args.append(run_filter.created_to_ms)
    if run_filter.text:
        # instr, not LIKE: the text is matched literally (no % or _ wildcards to escape).
        haystack = " || ' ' || ".join(f"COALESCE(r.{c}, '')" for c in TEXT_COLUMNS)
        clauses.append(f"instr(lower({haystack}), ?) > 0")
        args.append(run_filter.text.lower())
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
    return sql, args
