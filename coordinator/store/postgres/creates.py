"""A group of creates written by one statement (the group commit of concurrent CreateRun
calls, coordinator/service/group_commit.py): every run, first attempt, event and AIP-155
record of the group in one data-modifying CTE over unnest arrays, one round trip.

Its statement is kept here beside its arguments rather than in postgres/sql.py, which holds
every other statement of this store. Runs and attempts go as one array of the table's own
row type each (``unnest($1::runs[])``), not one array per column: asyncpg encodes a row as a
record, field by field, where each element of a column array costs it a handful of
abstract-class checks (issue #16: the statement's client CPU about halves). A row's fields
are in the table's column order, which RUN_COLUMNS and ATTEMPT_COLUMNS follow
(tests/integration/test_migrations.py checks the migrated tables keep that order).

A new run has no earlier event, so each event's tx_id is simply the writing transaction's id
and its sequence its place among the run's events.
A unique violation (an idempotency key, a request id) aborts the whole statement: nothing
of the group is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from coordinator.domain.decide import AttemptWrite, Decision, RunWrite
from coordinator.domain.model import Run
from coordinator.store.base import Applied, CasMiss, RequestRecord
from coordinator.store.postgres.sql import pg_type
from coordinator.store.rows import (
    ATTEMPT_COLUMNS,
    EVENT_COLUMNS,
    RUN_COLUMNS,
    attempt_values,
    run_values,
)
from coordinator.store.snapshots import encode, run_snapshot
from coordinator.store.sql import events_from_decision, stored_events
from kernel.db.schema import run_events
from kernel.records import replace

_REQUEST_FIELDS = (
    ("request_id", "text"),
    ("method", "text"),
    ("payload_hash", "text"),
    ("response", "bytea"),
    ("created_at_ms", "bigint"),
)


def _build() -> str:
    n = 2  # $1: the runs, $2: the attempts

    def unnest(kinds: Sequence[str]) -> str:
        nonlocal n
        params = []
        for kind in kinds:
            n += 1
            params.append(f"${n}::{kind}[]")
        return f"unnest({', '.join(params)})"

    run_columns, attempt_columns = ", ".join(RUN_COLUMNS), ", ".join(ATTEMPT_COLUMNS)
    event_kinds = [pg_type(run_events.c[c]) for c in EVENT_COLUMNS]
    events = ", ".join(EVENT_COLUMNS)
    return f"""
WITH r AS (
    INSERT INTO runs ({run_columns}) SELECT {run_columns} FROM unnest($1::runs[])
    RETURNING id),
a AS (
    INSERT INTO attempts ({attempt_columns}) SELECT {attempt_columns}
    FROM unnest($2::attempts[])
    RETURNING id),
e AS (
    INSERT INTO run_events ({events}, tx_id)
    SELECT {events}, pg_current_xact_id()::text::bigint
    FROM {unnest(event_kinds)} WITH ORDINALITY AS ev({events}, ord)
    ORDER BY ord),
q AS (
    INSERT INTO request_log ({", ".join(name for name, _ in _REQUEST_FIELDS)})
    SELECT * FROM {unnest([kind for _, kind in _REQUEST_FIELDS])})
SELECT (SELECT count(*) FROM r) AS runs, (SELECT count(*) FROM a) AS attempts"""


GROUP_INSERT = _build()


def groupable(decision: Decision) -> bool:
    """A create this statement writes: a new run, with or without its first attempt."""
    return decision.run_write is RunWrite.INSERT and decision.attempt_write in (
        None,
        AttemptWrite.INSERT,
    )


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * width


def _arguments(
    creates: Sequence[tuple[Decision, RequestRecord | None]],
) -> tuple[list[Any], list[tuple[Run, dict[str, Any]]]]:
    run_rows: list[tuple[Any, ...]] = []
    attempt_rows: list[tuple[Any, ...]] = []
    event_rows: list[list[Any]] = []
    request_rows: list[list[Any]] = []
    written: list[tuple[Run, dict[str, Any]]] = []
    for decision, request in creates:
        evs = events_from_decision(decision)
        run = replace(decision.run, event_sequence=evs["n_events"])
        values = run_values(run)
        run_rows.append(tuple([values[c] for c in RUN_COLUMNS]))
        if decision.attempt is not None:
            row = attempt_values(decision.attempt)
            attempt_rows.append(tuple([row[c] for c in ATTEMPT_COLUMNS]))
        for i in range(evs["n_events"]):
            event = {
                "id": evs["ev1"][i],
                "run_id": run.id,
                "sequence": i + 1,
                "type": evs["ev2"][i],
                "dedupe_key": None,
                "actor_type": evs["ev3"][i],
                "actor_id": evs["ev4"][i],
                "attempt_id": evs["ev5"][i],
                "payload": evs["ev6"][i],
                "created_at_ms": evs["created"],
                "project_id": run.project_id,
            }
            event_rows.append([event[c] for c in EVENT_COLUMNS])
        if request is not None:
            snapshot = encode(run_snapshot(run, decision.attempt))
            request_rows.append(
                [
                    request.request_id,
                    request.method,
                    request.payload_hash,
                    snapshot,
                    run.updated_at_ms,
                ]
            )
        written.append((run, evs))
    args = [
        run_rows,
        attempt_rows,
        *_columns(event_rows, len(EVENT_COLUMNS)),
        *_columns(request_rows, len(_REQUEST_FIELDS)),
    ]
    return args, written


async def apply_creates(
    conn: asyncpg.Connection, creates: Sequence[tuple[Decision, RequestRecord | None]]
) -> list[Applied]:
    """Write ``creates`` (all ``groupable``) in one statement, answered in the given order."""
    args, written = _arguments(creates)
    try:
        await conn.fetch(GROUP_INSERT, *args)
    except asyncpg.DeadlockDetectedError as exc:
        raise CasMiss("deadlock with another writer; nothing was written") from exc
    return [
        Applied(run, decision.attempt, stored_events(decision, evs, run.event_sequence, None))
        for (decision, _), (run, evs) in zip(creates, written, strict=True)
    ]
