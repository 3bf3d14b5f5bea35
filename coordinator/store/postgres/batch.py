"""Many decisions, each on its own run, written by one statement (runtime event batches).

Every row keeps the single-decision guarantees: compare-and-set of the run version and of the
attempt status + sequence, events numbered from the run's own counter. The counter is the one
the decision was made on (``event_sequence`` as read), checked by the statement like the
version, so each event's sequence is computed here: if any row misses (or an event appended
meanwhile holds a sequence this batch meant to use), the whole statement aborts, so a batch is
all or nothing. The statement is BATCH_UPDATE of postgres/sql.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from coordinator.domain.decide import Decision
from coordinator.domain.model import Run
from coordinator.store.base import Applied, CasMiss
from coordinator.store.output_sql import output_rows
from coordinator.store.postgres.sql import BATCH_UPDATE
from coordinator.store.rows import (
    ATTEMPT_COLUMNS,
    RUN_COLUMNS,
    RUN_MUTABLE,
    attempt_values,
    run_mutable_values,
)
from coordinator.store.sql import events_from_decision, stored_events
from kernel.records import replace

#: The (run_id, sequence) key of run_events.
EVENT_KEY = "pk_run_events"


# Where a run row's id and RUN_MUTABLE values go among RUN_COLUMNS: an update sends a row of
# the runs type with only those set (the statement reads nothing else of it).
_RUN_ID_AT = RUN_COLUMNS.index("id")
_RUN_MUTABLE_AT = tuple(RUN_COLUMNS.index(c) for c in RUN_MUTABLE)


def _run_row(run: Run) -> tuple[Any, ...]:
    row: list[Any] = [None] * len(RUN_COLUMNS)
    row[_RUN_ID_AT] = run.id
    for at, value in zip(_RUN_MUTABLE_AT, run_mutable_values(run), strict=True):
        row[at] = value
    return tuple(row)


def _arguments(decisions: Sequence[Decision]) -> tuple[list[Any], list[dict[str, Any]]]:
    run_rows: list[tuple[Any, ...]] = []
    attempt_rows: list[tuple[Any, ...]] = []
    checks: list[list[Any]] = [[] for _ in range(6)]
    events: list[list[Any]] = [[] for _ in range(11)]
    arrays: list[dict[str, Any]] = []
    for k, d in enumerate(decisions, start=1):
        assert d.attempt is not None and d.attempt_expected_status is not None
        evs = events_from_decision(d)
        arrays.append(evs)
        attempt_row = attempt_values(d.attempt)
        run_rows.append(_run_row(d.run))
        attempt_rows.append(tuple([attempt_row[c] for c in ATTEMPT_COLUMNS]))
        base = d.run.event_sequence  # as read: the domain never moves it
        for column, value in enumerate(
            [
                d.expected_version,
                evs["n_events"],
                base,
                d.attempt_expected_status.value,
                d.attempt_expected_seq,
                d.lease_written,
            ]
        ):
            checks[column].append(value)
        for i in range(evs["n_events"]):
            for column, value in enumerate(
                [
                    evs["ev1"][i],
                    d.run.id,
                    base + i + 1,
                    evs["ev2"][i],
                    evs["ev3"][i],
                    evs["ev4"][i],
                    evs["ev5"][i],
                    evs["ev6"][i],
                    evs["created"],
                    d.run.project_id,
                    k,
                ]
            ):
                events[column].append(value)
    pieces = [row for d in decisions for row in output_rows(d.output, d.run.updated_at_ms)]
    output = [list(column) for column in zip(*pieces, strict=True)] if pieces else [[]] * 5
    return [run_rows, attempt_rows, *checks, *events, *output], arrays


async def apply_batch(conn: asyncpg.Connection, decisions: Sequence[Decision]) -> list[Applied]:
    """Write ``decisions`` (all ``batchable``, on distinct runs) in one statement."""
    args, arrays = _arguments(decisions)
    try:
        rows = await conn.fetch(BATCH_UPDATE, *args)
    except asyncpg.DivisionByZeroError as exc:
        raise CasMiss("a run or attempt of the batch moved; nothing was written") from exc
    except asyncpg.UniqueViolationError as exc:
        if exc.constraint_name != EVENT_KEY:
            raise
        # an event another writer appended holds a sequence this batch computed
        raise CasMiss("a run's events moved; nothing was written") from exc
    if len(rows) != len(decisions):
        raise CasMiss("no run of the batch matched; nothing was written")
    sequences = {row["id"]: row["event_sequence"] for row in rows}
    applied = []
    for d, evs in zip(decisions, arrays, strict=True):
        sequence = sequences[d.run.id]
        run = d.run if d.run.event_sequence == sequence else replace(d.run, event_sequence=sequence)
        applied.append(Applied(run, d.attempt, stored_events(d, evs, sequence, None)))
    return applied
