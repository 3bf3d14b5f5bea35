"""Many decisions, each on its own run, written by one statement (runtime event batches).

Every row keeps the single-decision guarantees: compare-and-set of the run version and of the
attempt status + sequence, events numbered from the run's own counter. If any row misses, a
division by zero aborts the whole statement, so a batch is all or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import asyncpg
from sqlalchemy import BigInteger, Boolean, Integer

from coordinator.domain.decide import AttemptWrite, Decision, RunWrite
from coordinator.store.base import Applied, CasMiss
from coordinator.store.output_sql import OUTPUT_COLUMNS, output_rows
from coordinator.store.rows import (
    ATTEMPT_LEASE,
    ATTEMPT_MUTABLE,
    EVENT_COLUMNS,
    RUN_MUTABLE,
    attempt_values,
    run_values,
)
from coordinator.store.sql import EVENT_TX_ID, events_from_decision, stored_events
from kernel.db.schema import attempts, runs


def _pg_type(column: Any) -> str:
    if isinstance(column.type, BigInteger):
        return "bigint"
    if isinstance(column.type, Integer):
        return "int"
    if isinstance(column.type, Boolean):
        return "boolean"
    return "text"


def batchable(decision: Decision) -> bool:
    return decision.run_write is RunWrite.UPDATE and decision.attempt_write is AttemptWrite.UPDATE


def _build() -> str:
    n = 0

    def param(kind: str) -> str:
        nonlocal n
        n += 1
        return f"${n}::{kind}[]"

    fields = [("run_id", "text"), ("expected_version", "bigint"), ("n_events", "bigint")]
    fields += [(f"r_{c}", _pg_type(runs.c[c])) for c in RUN_MUTABLE]
    fields += [("a_id", "text"), ("a_expected_status", "text"), ("a_expected_seq", "bigint")]
    fields += [("a_lease_written", "boolean")]
    fields += [(f"a_{c}", _pg_type(attempts.c[c])) for c in ATTEMPT_MUTABLE]
    unnest = ", ".join(param(kind) for _, kind in fields)
    names = ", ".join(name for name, _ in fields)
    run_sets = ", ".join(f"{c} = v.r_{c}" for c in RUN_MUTABLE)
    attempt_sets = ", ".join(
        f"{c} = CASE WHEN v.a_lease_written THEN v.a_{c} ELSE attempts.{c} END"
        if c in ATTEMPT_LEASE
        else f"{c} = v.a_{c}"
        for c in ATTEMPT_MUTABLE
    )
    event_fields = ["id", "run_id", "ord", "type", "actor_type", "actor_id", "attempt_id"]
    event_fields += ["payload", "created_at_ms"]
    event_kinds = ["text", "text", "bigint", "text", "text", "text", "text", "text", "bigint"]
    event_unnest = ", ".join(param(kind) for kind in event_kinds)
    output_unnest = ", ".join(param(kind) for kind in ("text", "bigint", "text", "text", "bigint"))
    return f"""
WITH v AS (SELECT * FROM unnest({unnest}) AS v({names})),
r AS (
    UPDATE runs SET {run_sets}, event_sequence = runs.event_sequence + v.n_events
    FROM v WHERE runs.id = v.run_id AND runs.version = v.expected_version
    RETURNING runs.id, runs.event_sequence, v.n_events, runs.project_id),
a AS (
    UPDATE attempts SET {attempt_sets}
    FROM v JOIN r ON r.id = v.run_id
    WHERE attempts.id = v.a_id AND attempts.status = v.a_expected_status
      AND attempts.last_event_seq = v.a_expected_seq
    RETURNING attempts.id),
e AS (
    INSERT INTO run_events ({", ".join(EVENT_COLUMNS)}, tx_id)
    SELECT ev.id, ev.run_id, r.event_sequence - r.n_events + ev.ord, ev.type, NULL,
           ev.actor_type, ev.actor_id, ev.attempt_id, ev.payload, ev.created_at_ms,
           r.project_id, {EVENT_TX_ID}
    FROM unnest({event_unnest}) AS ev({", ".join(event_fields)})
    JOIN r ON r.id = ev.run_id
    LEFT JOIN run_events prev
      ON prev.run_id = r.id AND prev.sequence = r.event_sequence - r.n_events
    ORDER BY ev.run_id, ev.ord),
o AS (
    INSERT INTO attempt_output ({", ".join(OUTPUT_COLUMNS)})
    SELECT o.* FROM unnest({output_unnest}) AS o({", ".join(OUTPUT_COLUMNS)})
    JOIN a ON a.id = o.attempt_id)
SELECT r.id, r.event_sequence,
       1 / (CASE WHEN (SELECT count(*) FROM r) = cardinality($1::text[])
                  AND (SELECT count(*) FROM a) = cardinality($1::text[]) THEN 1 ELSE 0 END)
           AS all_or_nothing
FROM r"""


BATCH_UPDATE = _build()


def _arguments(decisions: Sequence[Decision]) -> tuple[list[Any], list[dict[str, Any]]]:
    rows: list[list[Any]] = []
    events: list[list[Any]] = [[] for _ in range(9)]
    arrays: list[dict[str, Any]] = []
    for d in decisions:
        assert d.attempt is not None and d.attempt_expected_status is not None
        evs = events_from_decision(d)
        arrays.append(evs)
        run_row, attempt_row = run_values(d.run), attempt_values(d.attempt)
        rows.append(
            [d.run.id, d.expected_version, evs["n_events"]]
            + [run_row[c] for c in RUN_MUTABLE]
            + [d.attempt.id, d.attempt_expected_status.value, d.attempt_expected_seq]
            + [d.lease_written]
            + [attempt_row[c] for c in ATTEMPT_MUTABLE]
        )
        for i in range(evs["n_events"]):
            for column, value in enumerate(
                [
                    evs["ev1"][i],
                    d.run.id,
                    i + 1,
                    evs["ev2"][i],
                    evs["ev3"][i],
                    evs["ev4"][i],
                    evs["ev5"][i],
                    evs["ev6"][i],
                    evs["created"],
                ]
            ):
                events[column].append(value)
    columns = [list(column) for column in zip(*rows, strict=True)] if rows else []
    pieces = [row for d in decisions for row in output_rows(d.output, d.run.updated_at_ms)]
    output = [list(column) for column in zip(*pieces, strict=True)] if pieces else [[]] * 5
    return columns + events + output, arrays


async def apply_batch(conn: asyncpg.Connection, decisions: Sequence[Decision]) -> list[Applied]:
    """Write ``decisions`` (all ``batchable``, on distinct runs) in one statement."""
    args, arrays = _arguments(decisions)
    try:
        rows = await conn.fetch(BATCH_UPDATE, *args)
    except asyncpg.DivisionByZeroError as exc:
        raise CasMiss("a run or attempt of the batch moved; nothing was written") from exc
    if len(rows) != len(decisions):
        raise CasMiss("no run of the batch matched; nothing was written")
    sequences = {row["id"]: row["event_sequence"] for row in rows}
    applied = []
    for d, evs in zip(decisions, arrays, strict=True):
        sequence = sequences[d.run.id]
        run = d.run if d.run.event_sequence == sequence else replace(d.run, event_sequence=sequence)
        applied.append(Applied(run, d.attempt, stored_events(d, evs, sequence, None)))
    return applied
