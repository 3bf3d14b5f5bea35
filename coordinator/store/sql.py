"""SQL pieces both backends share: placeholder numbering, event rows, queue position."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.domain.decide import AttemptWrite, Decision, RunWrite
from coordinator.domain.model import RunEvent
from coordinator.domain.states import RUN_TERMINAL
from coordinator.store.base import Scan
from coordinator.store.rows import ATTEMPT_COLUMNS, dumps
from kernel.ids import uuid7

TERMINAL_STATUSES = sorted(status.value for status in RUN_TERMINAL)


# The tx_id of a new event on PostgreSQL (``prev``: the run's previous event, joined by the
# insert): the writing transaction's id, raised to the previous event's so a run's events
# never sort out of sequence order even when this transaction's id is older than the one
# that wrote the previous event (docs/events.md).
def event_tx_id(previous: str = "prev.tx_id") -> str:
    """The new event's tx_id, ``previous`` the expression of the run's previous event's."""
    return f"GREATEST(pg_current_xact_id()::text::bigint, COALESCE({previous}, 0))"


class Placeholders:
    """Names placeholders once; PostgreSQL numbers them ($1, $2, ...)."""

    def __init__(self, style: Callable[[int, str], str] = lambda i, _: f"${i}") -> None:
        self._names: dict[str, int] = {}
        self._style = style

    def next(self, name: str) -> str:
        index = self._names.setdefault(name, len(self._names) + 1)
        return self._style(index, name)

    peek = next

    def bind(self, values: dict[str, Any]) -> list[Any]:
        return [values.get(name) for name in self._names]


def batchable(decision: Decision) -> bool:
    """A decision a batch (apply_all, apply_many) writes with the others in one statement on
    PostgreSQL: a run and attempt update. In a batch its events are numbered from the run's
    event sequence as the decision read it, which both stores check like the version."""
    return (
        decision.run_write is RunWrite.UPDATE
        and decision.attempt_write is AttemptWrite.UPDATE
        and decision.grant is None
    )


def events_from_decision(decision: Decision) -> dict[str, Any]:
    """Column arrays for the decision's events; sequences are assigned inside the statement."""
    events = decision.events
    return {
        "n_events": len(events),
        "created": decision.run.updated_at_ms,
        "ev1": [uuid7() for _ in events],
        "ev2": [e.type for e in events],
        "ev3": [e.actor.type.value for e in events],
        "ev4": [e.actor.id for e in events],
        "ev5": [e.attempt_id for e in events],
        "ev6": [dumps(e.payload) for e in events],
    }


def queue_position_sql(
    owner: str, run_now: str, priority: str, queued_at: str, run_id: str, project: str
) -> str:
    """Position among the owner's queued runs: run-now first, then priority, then age."""
    return f"""
SELECT count(*) + 1 FROM runs
WHERE status = 'queued' AND owner_id = {owner} AND project_id = {project} AND id <> {run_id}
  AND (CAST(run_now AS INTEGER) > {run_now}
       OR (CAST(run_now AS INTEGER) = {run_now} AND priority > {priority})
       OR (CAST(run_now AS INTEGER) = {run_now} AND priority = {priority}
           AND (queued_at_ms < {queued_at} OR (queued_at_ms = {queued_at} AND id < {run_id}))))"""


def stored_events(
    decision: Decision, arrays: dict[str, Any], last_sequence: int, dedupe_key: str | None
) -> tuple[RunEvent, ...]:
    """The decision's events as the statement stored them (ids from ``arrays``, sequences
    ending at ``last_sequence``), built here instead of read back from the database."""
    first = last_sequence - len(decision.events) + 1
    return tuple(
        RunEvent(
            id=arrays["ev1"][i],
            run_id=decision.run.id,
            sequence=first + i,
            type=event.type,
            dedupe_key=dedupe_key if i == 0 else None,
            actor=event.actor,
            attempt_id=event.attempt_id,
            payload=event.payload,
            created_at_ms=arrays["created"],
            project_id=decision.run.project_id,
        )
        for i, event in enumerate(decision.events)
    )


_SCAN_WHERE = {
    Scan.EXPIRED_LEASES: (
        "a.status IN ('claimed', 'starting', 'running') AND a.lease_expires_at_ms < {mark}"
        " AND a.sync_state <> 'stale'",
        "a.lease_expires_at_ms, a.id",
    ),
    Scan.SILENT_UNKNOWNS: (
        "a.status IN ('starting', 'running') AND a.sync_state = 'stale'"
        " AND a.lease_expires_at_ms < {mark}",
        "a.lease_expires_at_ms, a.id",
    ),
    Scan.QUIET_RUNNING: (
        "a.status = 'running' AND r.status = 'running' AND r.cancel_requested_at_ms IS NULL"
        " AND a.sync_state = 'in_sync' AND a.observed_at_ms < {mark}",
        "a.observed_at_ms, a.id",
    ),
}


def scan_sql(scan: Scan, mark: str, skip: str, limit: str, lock: str) -> str:
    """One reconciler scan's candidates (attempt columns), ``skip`` excluding ids already
    tried; ``lock``: the row-locking clause (PostgreSQL: FOR UPDATE ... SKIP LOCKED)."""
    where, order = _SCAN_WHERE[scan]
    columns = ", ".join(f"a.{name} AS {name}" for name in ATTEMPT_COLUMNS)
    return (
        f"SELECT {columns} FROM attempts a JOIN runs r ON r.id = a.run_id"
        f" WHERE {where.format(mark=mark)} AND {skip} ORDER BY {order} LIMIT {limit} {lock}"
    )


#: The columns of the rows written beside a decision, in their statements' order.
_INSERTED = {
    "request_log": ("request_id", "method", "payload_hash", "response", "created_at_ms"),
    "run_approvals": ("run_id", "approver", "approver_groups", "granted_at_ms"),
}


def insert_sql(table: str, mark: Callable[[int], str]) -> str:
    """``INSERT INTO table (columns) VALUES (...)`` with each dialect's numbered marks."""
    columns = _INSERTED[table]
    marks = ", ".join(mark(n) for n in range(1, len(columns) + 1))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
