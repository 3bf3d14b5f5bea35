"""Mapping between domain dataclasses and table rows, shared by every backend."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, Generic, TypeVar

from coordinator.domain import approvals
from coordinator.domain.cursor import EventCursor
from coordinator.domain.model import Actor, Attempt, Run, RunEvent
from coordinator.domain.states import (
    ActorType,
    AttemptStatus,
    ObservedState,
    RunStatus,
    ScopePolicy,
    SyncState,
)
from kernel import json_bounds
from kernel.db.schema import attempts, run_events, runs

R = TypeVar("R", Run, Attempt)

RUN_COLUMNS: tuple[str, ...] = tuple(c.name for c in runs.columns)
ATTEMPT_COLUMNS: tuple[str, ...] = tuple(c.name for c in attempts.columns)
#: The project cursor's columns: the database fills them in (docs/events.md).
EVENT_CURSOR_COLUMNS: tuple[str, ...] = ("tx_id", "position")
#: Columns an event insert writes.
EVENT_COLUMNS: tuple[str, ...] = tuple(
    c.name for c in run_events.columns if c.name not in EVENT_CURSOR_COLUMNS
)
#: Columns an event read returns.
EVENT_READ_COLUMNS: tuple[str, ...] = EVENT_COLUMNS + EVENT_CURSOR_COLUMNS

#: Columns a transition may change; everything else is fixed when the row is inserted.
RUN_MUTABLE: tuple[str, ...] = (
    "status",
    "version",
    "updated_at_ms",
    "queued_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "cancel_requested_at_ms",
    "cancel_reason",
    "error_code",
    "error_summary",
    "current_attempt_id",
    "attempt_count",
    "recovery_count",
    "approval",  # a grant adds to it (docs/state-model.md "Approvals")
)
#: Written by heartbeats (renew_leases), never by a decision: transitions leave it alone.
ATTEMPT_HEARTBEAT_ONLY = ("heartbeat_at_ms",)
#: Written by a decision only when it changes them (claim, release, finish); otherwise the
#: value a concurrent heartbeat renewal just stored is kept.
ATTEMPT_LEASE: tuple[str, ...] = ("lease_token", "lease_expires_at_ms")

ATTEMPT_MUTABLE: tuple[str, ...] = tuple(
    c
    for c in ATTEMPT_COLUMNS
    if c
    not in {
        "id",
        "run_id",
        "attempt_no",
        "previous_attempt_id",
        "owner_id",
        "agent_id",
        "execution_scope",
        "runtime_task_id",
        "created_at_ms",
        *ATTEMPT_HEARTBEAT_ONLY,
    }
)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def grant_values(run_id: str, grant: approvals.Grant) -> tuple[str, str, str, int]:
    """A ``run_approvals`` row, in insert_sql's column order."""
    return (run_id, grant.approver, dumps(list(grant.groups)), grant.granted_at_ms)


def run_values(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "project_id": run.project_id,
        "owner_id": run.owner_id,
        "task_id": run.task_id,
        "task_revision": run.task_revision,
        "agent_id": run.agent_id,
        "execution_scope": run.execution_scope,
        "scope_policy": run.scope_policy.value,
        "trigger_type": run.trigger_type,
        "trigger_id": run.trigger_id,
        "idempotency_key": run.idempotency_key,
        "retry_of_run_id": run.retry_of_run_id,
        "priority": run.priority,
        "max_attempts": run.max_attempts,
        "idempotent": run.idempotent,
        "run_now": run.run_now,
        "pinned_runtime_instance_id": run.pinned_runtime_instance_id,
        "required_labels": dumps(list(run.required_labels)),
        "spec": dumps(run.spec),
        "status": run.status.value,
        "version": run.version,
        "event_sequence": run.event_sequence,
        "current_attempt_id": run.current_attempt_id,
        "attempt_count": run.attempt_count,
        "created_by": run.created_by,
        "created_at_ms": run.created_at_ms,
        "updated_at_ms": run.updated_at_ms,
        "queued_at_ms": run.queued_at_ms,
        "started_at_ms": run.started_at_ms,
        "finished_at_ms": run.finished_at_ms,
        "cancel_requested_at_ms": run.cancel_requested_at_ms,
        "cancel_reason": run.cancel_reason,
        "error_code": run.error_code,
        "error_summary": run.error_summary,
        "recovery_count": run.recovery_count,
        "request_fingerprint": run.request_fingerprint,
        "approval": approvals.encode(run.approval),
    }


def run_mutable_values(run: Run) -> list[Any]:
    """The RUN_MUTABLE columns' values, in that order: what an update writes (spec and
    labels never change after the insert; the approval's JSON only with an approval)."""
    return [
        run.status.value,
        run.version,
        run.updated_at_ms,
        run.queued_at_ms,
        run.started_at_ms,
        run.finished_at_ms,
        run.cancel_requested_at_ms,
        run.cancel_reason,
        run.error_code,
        run.error_summary,
        run.current_attempt_id,
        run.attempt_count,
        run.recovery_count,
        approvals.encode(run.approval),
    ]


def attempt_values(attempt: Attempt) -> dict[str, Any]:
    values = {name: getattr(attempt, name) for name in ATTEMPT_COLUMNS}
    values["status"] = attempt.status.value
    values["observed_state"] = attempt.observed_state.value
    values["sync_state"] = attempt.sync_state.value
    return values


class _RowDecoder(Generic[R]):
    """Builds a record from a row in one positional call: the record's fields in the order
    its class takes them, read by their column names (after a prefix, names made once per
    prefix), the few listed in ``decoded`` turned from their stored form."""

    def __init__(
        self, record: type[R], columns: tuple[str, ...], decoded: dict[str, Callable[[Any], Any]]
    ) -> None:
        names = tuple(f.name for f in fields(record))
        assert set(names) == set(columns), f"a {record.__name__} field without its column"
        self._record: type[R] = record
        self._names = names
        self._decode = tuple((i, decoded[n]) for i, n in enumerate(names) if n in decoded)
        self._keys: dict[str, tuple[str, ...]] = {}

    def __call__(self, row: Mapping[str, Any], prefix: str) -> R:
        keys = self._keys.get(prefix)
        if keys is None:
            keys = self._keys[prefix] = tuple(prefix + name for name in self._names)
        values = [row[key] for key in keys]
        for i, decode in self._decode:
            values[i] = decode(values[i])
        return self._record(*values)


# Enum members by stored value: a dict lookup, not the enum's own call (a run's path decodes
# a few rows, each several enums).
_SCOPE_POLICY = {member.value: member for member in ScopePolicy}
_RUN_STATUS = {member.value: member for member in RunStatus}
_ATTEMPT_STATUS = {member.value: member for member in AttemptStatus}
_OBSERVED = {member.value: member for member in ObservedState}
_SYNC = {member.value: member for member in SyncState}
_RUNS = _RowDecoder(
    Run,
    RUN_COLUMNS,
    {
        "scope_policy": _SCOPE_POLICY.__getitem__,
        "status": _RUN_STATUS.__getitem__,
        "idempotent": bool,  # SQLite: 0/1
        "run_now": bool,
        "required_labels": lambda text: tuple(json.loads(text)),
        "spec": json_bounds.stored,  # a row too deep to render reads as a note
        "approval": approvals.decode,
    },
)
_ATTEMPTS = _RowDecoder(
    Attempt,
    ATTEMPT_COLUMNS,
    {
        "status": _ATTEMPT_STATUS.__getitem__,
        "observed_state": _OBSERVED.__getitem__,
        "sync_state": _SYNC.__getitem__,
        "output_truncated": bool,  # SQLite: 0/1
    },
)


def run_from_row(row: Mapping[str, Any], prefix: str = "") -> Run:
    return _RUNS(row, prefix)


def attempt_from_row(row: Mapping[str, Any], prefix: str = "") -> Attempt | None:
    if row[prefix + "id"] is None:
        return None
    return _ATTEMPTS(row, prefix)


def event_from_row(row: Mapping[str, Any]) -> RunEvent:
    return RunEvent(
        id=row["id"],
        run_id=row["run_id"],
        sequence=row["sequence"],
        type=row["type"],
        dedupe_key=row["dedupe_key"],
        actor=Actor(ActorType(row["actor_type"]), row["actor_id"]),
        attempt_id=row["attempt_id"],
        payload=json_bounds.stored(row["payload"]),
        created_at_ms=row["created_at_ms"],
        project_id=row["project_id"],
        cursor=EventCursor(row["tx_id"], row["position"]),
    )


def attempt_set_clause(placeholder: Callable[[str], str], lease_flag: str) -> str:
    """SET list of an attempt update; lease columns only when the decision changed them."""
    parts = []
    for column in ATTEMPT_MUTABLE:
        value = placeholder(column)
        if column in ATTEMPT_LEASE:
            value = f"CASE WHEN {lease_flag} THEN {value} ELSE attempts.{column} END"
        parts.append(f"{column} = {value}")
    return ", ".join(parts)
