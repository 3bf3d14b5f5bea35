"""Every statement of the PostgreSQL store, its text kept together (as procrastinate keeps
``sql/queries.sql``): the constants the reader, the lease book and the writer run, and the
builders of the data-modifying CTEs (one decision, events, a batch), built once at import.
Dialect-neutral pieces are in coordinator/store/sql.py and output_sql.py.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Boolean, Integer

from coordinator.domain.decide import AttemptWrite, RunWrite
from coordinator.store.base import TEXT_COLUMNS, RunCursor, RunFilter, Scan
from coordinator.store.output_sql import OUTPUT_COLUMNS, delete_sql, read_sql
from coordinator.store.rows import (
    ATTEMPT_COLUMNS,
    ATTEMPT_LEASE,
    ATTEMPT_MUTABLE,
    EVENT_COLUMNS,
    EVENT_READ_COLUMNS,
    RUN_COLUMNS,
    RUN_MUTABLE,
    attempt_set_clause,
)
from coordinator.store.sql import (
    Placeholders,
    event_tx_id,
    insert_sql,
    queue_position_sql,
    scan_sql,
)

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

LOAD_RUNS = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}
FROM runs r LEFT JOIN attempts a ON a.id = r.current_attempt_id AND a.run_id = r.id
WHERE r.id = ANY($1::text[])"""

LOAD_ATTEMPTS = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}
FROM attempts a JOIN runs r ON r.id = a.run_id
WHERE a.id = ANY($1::text[])"""

OUTPUT_READ = read_sql(lambda n: "$" + n)
OUTPUT_DELETE = delete_sql(lambda n: "$" + n)

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
       ev.payload, {created}::bigint, src.project_id, {event_tx_id()}
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


STATEMENTS: dict[tuple[RunWrite, AttemptWrite | None], tuple[str, Placeholders]] = {
    (RunWrite.UPDATE, None): _build_update(None),
    (RunWrite.UPDATE, AttemptWrite.UPDATE): _build_update(AttemptWrite.UPDATE),
    (RunWrite.UPDATE, AttemptWrite.INSERT): _build_update(AttemptWrite.INSERT),
    (RunWrite.INSERT, None): _build_insert(False),
    (RunWrite.INSERT, AttemptWrite.INSERT): _build_insert(True),
    (RunWrite.EVENTS_ONLY, None): _build_events_only(),
}

FIND_BY_KEY = f"""
SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}, false AS dedupe_hit
FROM runs r LEFT JOIN attempts a ON a.id = r.current_attempt_id
WHERE r.project_id = $1 AND r.idempotency_key = $2"""
LIST_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE run_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3"""
# pg_snapshot_xmin: every transaction with a smaller id has finished, so every event below it
# that will ever commit has (docs/events.md). The row comparison walks the cursor index.
_STABLE = "tx_id < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
PROJECT_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE project_id = $1 AND (tx_id, position) > ($2, $3) AND {_STABLE}
ORDER BY tx_id, position LIMIT $4"""
ALL_EVENTS = f"""
SELECT {", ".join(EVENT_READ_COLUMNS)} FROM run_events
WHERE (tx_id, position) > ($1, $2) AND {_STABLE}
ORDER BY tx_id, position LIMIT $3"""
LAST_EVENT_CURSOR = f"""
SELECT tx_id, position FROM run_events WHERE {_STABLE}
ORDER BY tx_id DESC, position DESC LIMIT 1"""
LIST_ATTEMPTS = f"""
SELECT {", ".join(ATTEMPT_COLUMNS)} FROM attempts WHERE run_id = $1 ORDER BY attempt_no"""
EXPIRED_LEASES = f"""
SELECT {", ".join(ATTEMPT_COLUMNS)} FROM attempts
WHERE status IN ('claimed', 'starting', 'running') AND lease_expires_at_ms < $1
  AND sync_state <> 'stale'
ORDER BY lease_expires_at_ms, id LIMIT $2"""
SILENT_UNKNOWNS = f"""
SELECT {", ".join(ATTEMPT_COLUMNS)} FROM attempts
WHERE status IN ('starting', 'running') AND sync_state = 'stale' AND lease_expires_at_ms < $1
ORDER BY lease_expires_at_ms, id LIMIT $2"""
OLDEST_NON_TERMINAL = """
SELECT status, min(updated_at_ms) FROM runs WHERE status <> ALL($1::text[]) GROUP BY status"""
QUEUED_BY_PROJECT = """
SELECT project_id, count(*), min(queued_at_ms) FROM runs WHERE status = 'queued'
GROUP BY project_id"""
DUE_RETRIES = """
SELECT id FROM runs WHERE status = 'retry_wait' AND updated_at_ms < $1
ORDER BY updated_at_ms, id LIMIT $2"""
# Rows locked in id order, as apply_all locks them, so a renewal and a batch never deadlock.
RENEW_LEASES = """
UPDATE attempts SET heartbeat_at_ms = $3, lease_expires_at_ms = GREATEST(lease_expires_at_ms, $4),
    callback_token_expires_at_ms = GREATEST(callback_token_expires_at_ms, $6)
WHERE id IN (
    SELECT id FROM attempts
    WHERE id = ANY($5::text[]) AND owner_id = $1 AND runtime_instance_id = $2
        AND status IN ('starting', 'running')
    ORDER BY id FOR UPDATE)"""
STARTED_ATTEMPTS = f"""
SELECT {", ".join(ATTEMPT_COLUMNS)} FROM attempts
WHERE owner_id = $1 AND runtime_instance_id = $2 AND status IN ('starting', 'running')"""
BIND_INSTANCE = """
WITH bound AS (
    INSERT INTO runtime_bindings (runtime_instance_id, owner_id, bound_at_ms)
    VALUES ($1, $2, $3) ON CONFLICT (runtime_instance_id) DO NOTHING RETURNING owner_id)
SELECT owner_id FROM bound
UNION ALL SELECT owner_id FROM runtime_bindings WHERE runtime_instance_id = $1
LIMIT 1"""
RECORD_LINEAGE = """
INSERT INTO runtime_instances
    (owner_id, runtime_instance_id, lineage, first_hello_at_ms, last_hello_at_ms)
VALUES ($1, $2, $3, $4, $4)
ON CONFLICT (owner_id, runtime_instance_id)
DO UPDATE SET lineage = EXCLUDED.lineage, last_hello_at_ms = EXCLUDED.last_hello_at_ms
RETURNING first_hello_at_ms"""
EARLIER_IN_LINEAGE = """
SELECT runtime_instance_id FROM runtime_instances
WHERE owner_id = $1 AND lineage = $2 AND replaced_at_ms IS NULL
  AND (first_hello_at_ms, runtime_instance_id) < ($3, $4)
ORDER BY first_hello_at_ms, runtime_instance_id"""
MARK_REPLACED = (
    "UPDATE runtime_instances SET replaced_at_ms = $3"
    " WHERE owner_id = $1 AND runtime_instance_id = $2 AND replaced_at_ms IS NULL"
)
GET_REQUEST = "SELECT method, payload_hash, response FROM request_log WHERE request_id = $1"
PUT_REQUEST = insert_sql("request_log", lambda n: f"${n}")
PUT_GRANT = insert_sql("run_approvals", lambda n: f"${n}")
QUEUE_POSITION = queue_position_sql("$1", "$2", "$3", "$4", "$5", "$6")
OPEN_IN_SCOPE = """
SELECT id FROM runs WHERE execution_scope = $1 AND status <> ALL($2::text[])
ORDER BY created_at_ms, id"""
ADVISORY_LOCKS = """
SELECT pg_advisory_xact_lock(hashtextextended(key, 0))
FROM unnest($1::text[]) WITH ORDINALITY AS k(key, n) ORDER BY n"""


SCANS = {
    scan: scan_sql(scan, "$1", "a.id <> ALL($2::text[])", "$3", "FOR UPDATE OF a, r SKIP LOCKED")
    for scan in Scan
}


def list_runs_sql(
    run_filter: RunFilter, after: RunCursor | None, limit: int
) -> tuple[str, list[Any]]:
    """The newest-first listing's statement and its arguments."""
    clauses, args = _filter_clauses(run_filter, after)
    args.append(limit)
    sql = (
        f"SELECT {_RUN_SELECT}, {_ATTEMPT_SELECT}, false AS dedupe_hit FROM runs r "
        "LEFT JOIN attempts a ON a.id = r.current_attempt_id "
        f"{('WHERE ' + ' AND '.join(clauses)) if clauses else ''} "
        f"ORDER BY r.created_at_ms DESC, r.id DESC LIMIT ${len(args)}"
    )
    return sql, args


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
    if run_filter.task_id:
        add("r.task_id = ?", run_filter.task_id)
    if run_filter.created_from_ms is not None:
        add("r.created_at_ms >= ?", run_filter.created_from_ms)
    if run_filter.created_to_ms is not None:
        add("r.created_at_ms < ?", run_filter.created_to_ms)
    if run_filter.text:
        # strpos, not LIKE: the text is matched literally (no % or _ wildcards to escape).
        haystack = ", ".join(f"r.{c}" for c in TEXT_COLUMNS)
        add(f"strpos(lower(concat_ws(' ', {haystack})), ?::text) > 0", run_filter.text.lower())
    if after is not None:
        args.append(after.created_at_ms)
        args.append(after.run_id)
        n = len(args)
        clauses.append(f"(r.created_at_ms, r.id) < (${n - 1}, ${n})")
    return clauses, args


# The runtime event batch (postgres/batch.py): many decisions, each on its own run, in one
# statement.
def pg_type(column: Any) -> str:
    if isinstance(column.type, BigInteger):
        return "bigint"
    if isinstance(column.type, Integer):
        return "int"
    if isinstance(column.type, Boolean):
        return "boolean"
    return "text"


def _build_batch() -> str:
    # $1 runs[] (id and RUN_MUTABLE set, the rest NULL), $2 attempts[] (every column): rows
    # of the tables' own types, which asyncpg encodes as records (see postgres/creates.py);
    # then the compare-and-set values and the events and output pieces, a column array each.
    #
    # Nothing here joins two row sets by value: each event carries its own sequence (the
    # run's event_sequence as read + its place) and its run's place k in $1, and the previous
    # event's tx_id is looked up once a run and picked by k from an array. A join of the
    # events to the updated runs was planned as a nested loop over the unnested arrays, the
    # whole event list scanned once a run: quadratic, 8 ms of a 64-run batch's 23 ms in
    # PostgreSQL (issue #16, 2026-12-06, session 21).
    n = 2

    def param(kind: str) -> str:
        nonlocal n
        n += 1
        return f"${n}::{kind}[]"

    checks = [("expected_version", "bigint"), ("n_events", "bigint"), ("base", "bigint")]
    checks += [("a_expected_status", "text"), ("a_expected_seq", "bigint")]
    checks += [("a_lease_written", "boolean")]
    unnest = ", ".join(["$1::runs[]", "$2::attempts[]"] + [param(kind) for _, kind in checks])
    # unnest expands each row into its fields, named here in the tables' column order
    names = [f"r_{c}" for c in RUN_COLUMNS] + [f"a_{c}" for c in ATTEMPT_COLUMNS]
    names += [name for name, _ in checks]
    run_sets = ", ".join(f"{c} = v.r_{c}" for c in RUN_MUTABLE)
    attempt_sets = ", ".join(
        f"{c} = CASE WHEN v.a_lease_written THEN v.a_{c} ELSE attempts.{c} END"
        if c in ATTEMPT_LEASE
        else f"{c} = v.a_{c}"
        for c in ATTEMPT_MUTABLE
    )
    event_fields = ["id", "run_id", "sequence", "type", "actor_type", "actor_id", "attempt_id"]
    event_fields += ["payload", "created_at_ms", "project_id", "k"]
    event_kinds = ["text", "text", "bigint", "text", "text", "text", "text", "text", "bigint"]
    event_kinds += ["text", "int"]
    event_unnest = ", ".join(param(kind) for kind in event_kinds)
    output_unnest = ", ".join(param(kind) for kind in ("text", "bigint", "text", "text", "bigint"))
    return f"""
WITH v AS (SELECT * FROM unnest({unnest}) WITH ORDINALITY AS v({", ".join(names)}, k)),
r AS (
    UPDATE runs SET {run_sets}, event_sequence = v.base + v.n_events
    FROM v WHERE runs.id = v.r_id AND runs.version = v.expected_version
      AND runs.event_sequence = v.base
    RETURNING runs.id, runs.event_sequence),
a AS (
    UPDATE attempts SET {attempt_sets}
    FROM v JOIN r ON r.id = v.r_id
    WHERE attempts.id = v.a_id AND attempts.status = v.a_expected_status
      AND attempts.last_event_seq = v.a_expected_seq
    RETURNING attempts.id),
p AS (
    SELECT array_agg(COALESCE(prev.tx_id, 0) ORDER BY v.k) AS tx_ids
    FROM v LEFT JOIN run_events prev ON prev.run_id = v.r_id AND prev.sequence = v.base),
e AS (
    INSERT INTO run_events ({", ".join(EVENT_COLUMNS)}, tx_id)
    SELECT ev.id, ev.run_id, ev.sequence, ev.type, NULL, ev.actor_type, ev.actor_id,
           ev.attempt_id, ev.payload, ev.created_at_ms, ev.project_id,
           {event_tx_id("p.tx_ids[ev.k]")}
    FROM unnest({event_unnest}) AS ev({", ".join(event_fields)}) CROSS JOIN p
    ORDER BY ev.run_id, ev.sequence),
o AS (
    INSERT INTO attempt_output ({", ".join(OUTPUT_COLUMNS)})
    SELECT o.* FROM unnest({output_unnest}) AS o({", ".join(OUTPUT_COLUMNS)})
    JOIN a ON a.id = o.attempt_id)
SELECT r.id, r.event_sequence,
       1 / (CASE WHEN (SELECT count(*) FROM r) = cardinality($1::runs[])
                  AND (SELECT count(*) FROM a) = cardinality($1::runs[]) THEN 1 ELSE 0 END)
           AS all_or_nothing
FROM r"""


BATCH_UPDATE = _build_batch()
