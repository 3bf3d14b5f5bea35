"""The long-task statements, written once with ``?`` placeholders and turned into
PostgreSQL's ``$n`` for that backend. Only this package writes the long-task tables
(scripts/architecture.py), always inside a transaction opened through the coordinator's door
(``Transitions.transaction``) by the long-task door, beside the runs an attempt creates.

The task row is the aggregate's lock: PostgreSQL locks it FOR UPDATE before anything of the
task is read, SQLite's single writer (BEGIN IMMEDIATE) serializes every transaction; every
update of the task compares ``state_version``, every update of a step its ``version``, a
receipt is written only onto an intent that has none, and a decision is closed only while
it is open. A miss raises ``Stale`` and the whole transaction rolls back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from coordinator.store.base import RunTxReader
from longtasks.domain.model import (
    Attempt,
    CriterionRecord,
    Decision,
    Effect,
    Event,
    Evidence,
    PlanStep,
    PlanVersion,
    Receipt,
    Task,
)
from longtasks.domain.states import CriterionResult, TaskState
from longtasks.store import records as rec
from longtasks.store import rows as r
from longtasks.store.action_sql import ActionStatements
from longtasks.store.continuation_sql import CONTINUATION_HOLDS, ContinuationStatements
from longtasks.store.notice_sql import NoticeStatements
from longtasks.store.preflight_sql import PreflightStatements
from longtasks.store.usage_sql import UsageStatements


class Stale(Exception):
    """A compare-and-set found another version (or a closed record): nothing was written."""


class TaskExists(Exception):
    pass


def _cols(columns: Sequence[str]) -> str:
    return ", ".join(columns)


def _insert(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({_cols(columns)}) VALUES ({', '.join('?' for _ in columns)})"


def _set(columns: Sequence[str]) -> str:
    return ", ".join(f"{c} = ?" for c in columns)


_TASK = f"SELECT {_cols(r.TASK)} FROM long_tasks WHERE id = ?"
_INSERT_TASK = (
    _insert("long_tasks", (*r.TASK, *r.TASK_DISPLAY)) + " ON CONFLICT (id) DO NOTHING RETURNING id"
)
_UPDATE_TASK = (
    f"UPDATE long_tasks SET {_set(r.TASK_MUTABLE)} WHERE id = ? AND state_version = ? RETURNING id"
)
_RENEW = (
    "UPDATE long_tasks SET lease_expires_at_ms = ? WHERE id = ? AND lease_attempt_id = ? "
    "AND lease_expires_at_ms > ? RETURNING id"
)
_TASK_DISPLAY = f"SELECT {_cols(r.TASK_DISPLAY)} FROM long_tasks WHERE id = ?"
_UPDATE_CONSTRAINTS = "UPDATE long_tasks SET constraints = ? WHERE id = ? RETURNING id"
_TASKS_OF_OWNER = (
    f"SELECT {_cols(r.TASK)} FROM long_tasks WHERE owner_id = ? ORDER BY created_at_ms DESC, id "
    "LIMIT ?"
)
#: A project's tasks with their display payloads, newest first, strictly after a cursor
#: (``created_at_ms``, ``id``); the optional owner and "not terminal" filters are bound as
#: values so one text serves every combination.
_TASKS_OF_PROJECT = (
    f"SELECT {_cols((*r.TASK, *r.TASK_DISPLAY))} FROM long_tasks WHERE project_id = ? "
    "AND (? = '' OR owner_id = ?) "
    "AND (? = 0 OR state NOT IN ('partial', 'completed', 'failed', 'cancelled')) "
    "AND (created_at_ms < ? OR (created_at_ms = ? AND id < ?)) "
    "ORDER BY created_at_ms DESC, id DESC LIMIT ?"
)
#: How many of an owner's queued tasks come before one (creation order, then id: the order
#: the scheduler starts them in); a task its continuation holds waits for no slot.
_QUEUED_AHEAD = (
    "SELECT COUNT(*) AS ahead FROM long_tasks WHERE owner_id = ? AND state = 'queued' "
    f"AND NOT {CONTINUATION_HOLDS} AND (created_at_ms < ? OR (created_at_ms = ? AND id < ?))"
)
_INSERT_PLAN = _insert("long_task_plan_versions", r.PLAN)
_CLOSE_PLAN = (
    "UPDATE long_task_plan_versions SET closed_state = ?, closed_at_ms = ? "
    "WHERE task_id = ? AND version = ? AND closed_state IS NULL RETURNING version"
)
_PLANS = f"SELECT {_cols(r.PLAN)} FROM long_task_plan_versions WHERE task_id = ? ORDER BY version"
_INSERT_STEP = _insert("long_task_steps", r.STEP)
_STEPS = (
    f"SELECT {_cols(r.STEP)} FROM long_task_steps WHERE task_id = ? AND plan_version = ? "
    "ORDER BY position"
)
_UPDATE_STEP = (
    f"UPDATE long_task_steps SET {_set(r.STEP_MUTABLE)} "
    "WHERE task_id = ? AND plan_version = ? AND step_id = ? AND version = ? RETURNING step_id"
)
_HELD = (
    "SELECT DISTINCT s.task_id FROM long_task_steps s JOIN long_tasks t ON t.id = s.task_id "
    "AND t.plan_version = s.plan_version WHERE s.state = 'running' "
    "UNION SELECT task_id FROM long_task_attempts WHERE ended_at_ms IS NULL"
)
_INSERT_CRITERION = _insert("long_task_criteria", r.CRITERION)
_CRITERIA = (
    f"SELECT {_cols(r.CRITERION)} FROM long_task_criteria WHERE task_id = ? "
    "AND plan_version = ? ORDER BY position"
)
_SET_RESULT = (
    "UPDATE long_task_criteria SET result = ?, result_source = ?, result_at_ms = ? "
    "WHERE task_id = ? AND plan_version = ? AND criterion_id = ? RETURNING criterion_id"
)
_INSERT_EFFECT = _insert("long_task_side_effects", rec.EFFECT)
_EFFECTS = f"SELECT {_cols(rec.EFFECT)} FROM long_task_side_effects WHERE task_id = ?"
_RECEIPT = (
    f"UPDATE long_task_side_effects SET {_set(rec.RECEIPT)} "
    "WHERE id = ? AND task_id = ? AND receipt_recorded_at_ms IS NULL RETURNING id"
)
_INSERT_EVIDENCE = _insert("long_task_evidence", rec.EVIDENCE)
_EVIDENCE = f"SELECT {_cols(rec.EVIDENCE)} FROM long_task_evidence WHERE task_id = ?"
_INSERT_DECISION = _insert("long_task_decisions", rec.DECISION)
_DECISIONS = f"SELECT {_cols(rec.DECISION)} FROM long_task_decisions WHERE task_id = ?"
_CLOSE_DECISION = (
    f"UPDATE long_task_decisions SET {_set(rec.DECISION_ANSWER)} "
    "WHERE id = ? AND task_id = ? AND state = 'open' RETURNING id"
)
_INSERT_ATTEMPT = _insert("long_task_attempts", rec.ATTEMPT)
_ATTEMPTS = f"SELECT {_cols(rec.ATTEMPT)} FROM long_task_attempts WHERE task_id = ?"
_ATTEMPT_OF_RUN = f"SELECT {_cols(rec.ATTEMPT)} FROM long_task_attempts WHERE run_id = ?"
_END_ATTEMPT = (
    "UPDATE long_task_attempts SET ended_at_ms = ?, outcome = ?, reason = ? "
    "WHERE id = ? AND task_id = ? AND ended_at_ms IS NULL RETURNING id"
)
_APPEND = _insert("long_task_events", rec.EVENT)
_EVENTS = (
    f"SELECT {_cols(rec.EVENT)} FROM long_task_events WHERE task_id = ? AND sequence > ? "
    "ORDER BY sequence LIMIT ?"
)


def _dollars(sql: str) -> str:
    parts = sql.split("?")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]


Read = Callable[..., Awaitable[list[Any]]]
Tx = RunTxReader


class LongTaskSql(
    UsageStatements,
    ActionStatements,
    PreflightStatements,
    NoticeStatements,
    ContinuationStatements,
):
    """The long-task reads and writes on one backend. ``read`` runs a read outside any
    transaction (the pool, or SQLite's reader connection); every write takes the
    transaction the door opened."""

    def __init__(self, postgres: bool, read: Read) -> None:
        self._postgres = postgres
        self._read = read

    def _q(self, sql: str) -> str:
        return _dollars(sql) if self._postgres else sql

    async def _fetch(self, tx: Tx | None, sql: str, *args: Any) -> list[Any]:
        if tx is not None:
            return await tx.fetch(self._q(sql), *args)
        return await self._read(self._q(sql), *args)

    async def _write(self, tx: Tx, sql: str, values: dict[str, Any], cols: Sequence[str]) -> None:
        await tx.fetch(self._q(sql), *(values[c] for c in cols))

    async def _cas(self, tx: Tx, sql: str, *args: Any) -> None:
        if not await tx.fetch(self._q(sql), *args):
            raise Stale(sql.split()[1])

    # -- tasks ------------------------------------------------------------------------

    async def insert_task(self, tx: Tx, task: Task, constraints: str, sources: str) -> None:
        values = r.task_values(task) | {"constraints": constraints, "sources": sources}
        args = [values[c] for c in (*r.TASK, *r.TASK_DISPLAY)]
        if not await tx.fetch(self._q(_INSERT_TASK), *args):
            raise TaskExists(task.id)

    async def lock_task(self, tx: Tx, task_id: str) -> Task | None:
        """The task, its row held until the commit (PostgreSQL FOR UPDATE; on SQLite the
        IMMEDIATE transaction already excludes every other writer)."""
        sql = self._q(_TASK) + (" FOR UPDATE" if self._postgres else "")
        rows = await tx.fetch(sql, task_id)
        return r.task_from_row(rows[0]) if rows else None

    async def update_task(self, tx: Tx, task: Task, expected_version: int) -> None:
        """Write ``task`` (its version already the next one) over ``expected_version``."""
        values = r.task_values(task)
        await self._cas(
            tx, _UPDATE_TASK, *(values[c] for c in r.TASK_MUTABLE), task.id, expected_version
        )

    async def update_constraints(self, tx: Tx, task_id: str, constraints: str) -> None:
        """A plan revision's new constraints (JSON list), in the door's transaction: the
        task row's compare-and-set in the same transaction guards the version."""
        await tx.fetch(self._q(_UPDATE_CONSTRAINTS), constraints, task_id)

    async def renew_lease(
        self, tx: Tx, task_id: str, attempt_id: str, now_ms: int, expires_ms: int
    ) -> bool:
        """Move the lease's expiry for the attempt holding it (no state change: no version,
        no event). False: it does not hold the lease, or it expired."""
        rows = await tx.fetch(self._q(_RENEW), expires_ms, task_id, attempt_id, now_ms)
        return bool(rows)

    async def get_task(self, task_id: str) -> Task | None:
        rows = await self._fetch(None, _TASK, task_id)
        return r.task_from_row(rows[0]) if rows else None

    async def task_display(self, task_id: str) -> dict[str, Any]:
        """The task's display payloads, parsed for a surface (None where unreadable)."""
        rows = await self._fetch(None, _TASK_DISPLAY, task_id)
        return {c: r.display_json(rows[0][c]) for c in r.TASK_DISPLAY} if rows else {}

    async def tasks_of_owner(self, owner_id: str, limit: int) -> list[Task]:
        rows = await self._fetch(None, _TASKS_OF_OWNER, owner_id, limit)
        return [r.task_from_row(row) for row in rows]

    async def tasks_of_project(
        self,
        project_id: str,
        owner_id: str | None,
        active_only: bool,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[tuple[Task, dict[str, Any]]]:
        """A project's tasks (one owner's, or only those not terminal), newest first,
        strictly after ``after`` (created_at_ms, id), each with its display payloads."""
        at, last = after if after is not None else (2**62, "")  # later than any task
        rows = await self._fetch(
            None,
            _TASKS_OF_PROJECT,
            project_id,
            owner_id or "",
            owner_id or "",
            1 if active_only else 0,
            at,
            at,
            last,
            limit,
        )
        return [
            (r.task_from_row(row), {c: r.display_json(row[c]) for c in r.TASK_DISPLAY})
            for row in rows
        ]

    async def queued_ahead(self, task: Task) -> int:
        """How many of the owner's queued tasks start before ``task`` (0: it is next)."""
        at = task.created_at_ms
        rows = await self._fetch(None, _QUEUED_AHEAD, task.owner_id, at, at, task.id)
        return int(rows[0]["ahead"])

    # -- plan versions and steps ----------------------------------------------------------

    async def insert_plan(self, tx: Tx, plan: PlanVersion) -> None:
        await self._write(tx, _INSERT_PLAN, r.plan_values(plan), r.PLAN)

    async def close_plan(
        self, tx: Tx, task_id: str, version: int, state: TaskState, now_ms: int
    ) -> None:
        await self._cas(tx, _CLOSE_PLAN, state.value, now_ms, task_id, version)

    async def plans(self, task_id: str, tx: Tx | None = None) -> list[PlanVersion]:
        return [r.plan_from_row(row) for row in await self._fetch(tx, _PLANS, task_id)]

    async def insert_steps(self, tx: Tx, steps: Sequence[PlanStep]) -> None:
        for step in steps:
            await self._write(tx, _INSERT_STEP, r.step_values(step), r.STEP)

    async def steps(self, tx: Tx | None, task_id: str, version: int) -> list[PlanStep]:
        rows = await self._fetch(tx, _STEPS, task_id, version)
        return [r.step_from_row(row) for row in rows]

    async def update_step(self, tx: Tx, step: PlanStep, expected_version: int) -> None:
        values = r.step_values(step)
        key = (step.task_id, step.plan_version, step.step_id)
        await self._cas(
            tx, _UPDATE_STEP, *(values[c] for c in r.STEP_MUTABLE), *key, expected_version
        )

    async def tasks_with_holders(self) -> list[str]:
        """Tasks with a running step of their current plan or an attempt not ended: where
        a holder may have died."""
        return sorted({row[0] for row in await self._fetch(None, _HELD)})

    # -- criteria -------------------------------------------------------------------------

    async def insert_criteria(
        self, tx: Tx, task_id: str, version: int, records: Sequence[CriterionRecord]
    ) -> None:
        for record in records:
            values = r.criterion_values(task_id, version, record)
            await self._write(tx, _INSERT_CRITERION, values, r.CRITERION)

    async def criteria(self, tx: Tx | None, task_id: str, version: int) -> list[CriterionRecord]:
        rows = await self._fetch(tx, _CRITERIA, task_id, version)
        return [r.criterion_from_row(row) for row in rows]

    async def set_result(
        self,
        tx: Tx,
        task_id: str,
        version: int,
        criterion_id: str,
        result: CriterionResult,
        source: str,
        now_ms: int,
    ) -> None:
        await self._cas(
            tx, _SET_RESULT, result.value, source, now_ms, task_id, version, criterion_id
        )

    # -- side effects and evidence --------------------------------------------------------

    async def insert_effect(self, tx: Tx, effect: Effect) -> None:
        await self._write(tx, _INSERT_EFFECT, rec.effect_values(effect), rec.EFFECT)

    async def record_receipt(self, tx: Tx, effect: Effect, receipt: Receipt) -> None:
        """The receipt half onto its intent's row, once (Stale if it has one already)."""
        values = rec.effect_values(replace(effect, receipt=receipt))
        await self._cas(tx, _RECEIPT, *(values[c] for c in rec.RECEIPT), effect.id, effect.task_id)

    async def effects(self, tx: Tx | None, task_id: str) -> list[Effect]:
        return [rec.effect_from_row(row) for row in await self._fetch(tx, _EFFECTS, task_id)]

    async def insert_evidence(self, tx: Tx, evidence: Evidence) -> None:
        await self._write(tx, _INSERT_EVIDENCE, rec.evidence_values(evidence), rec.EVIDENCE)

    async def evidence(self, tx: Tx | None, task_id: str) -> list[Evidence]:
        rows = await self._fetch(tx, _EVIDENCE, task_id)
        return sorted((rec.evidence_from_row(row) for row in rows), key=lambda e: e.id)

    # -- decisions and attempts -----------------------------------------------------------

    async def insert_decision(self, tx: Tx, decision: Decision) -> None:
        await self._write(tx, _INSERT_DECISION, rec.decision_values(decision), rec.DECISION)

    async def decisions(self, tx: Tx | None, task_id: str) -> list[Decision]:
        rows = await self._fetch(tx, _DECISIONS, task_id)
        return sorted((rec.decision_from_row(row) for row in rows), key=lambda d: d.id)

    async def close_decision(self, tx: Tx, decision: Decision) -> None:
        """Answer or expire an open decision (Stale if it is not open any more)."""
        values = rec.decision_values(decision)
        args = (*(values[c] for c in rec.DECISION_ANSWER), decision.id, decision.task_id)
        await self._cas(tx, _CLOSE_DECISION, *args)

    async def insert_attempt(self, tx: Tx, attempt: Attempt) -> None:
        await self._write(tx, _INSERT_ATTEMPT, rec.attempt_values(attempt), rec.ATTEMPT)

    async def attempts(self, tx: Tx | None, task_id: str) -> list[Attempt]:
        rows = await self._fetch(tx, _ATTEMPTS, task_id)
        return sorted((rec.attempt_from_row(row) for row in rows), key=lambda a: a.attempt_no)

    async def attempt_of_run(self, run_id: str) -> Attempt | None:
        """The long-task attempt a run carries out (None: the run is no attempt)."""
        rows = await self._fetch(None, _ATTEMPT_OF_RUN, run_id)
        return rec.attempt_from_row(rows[0]) if rows else None

    async def end_attempt(self, tx: Tx, attempt: Attempt) -> None:
        assert attempt.ended_at_ms is not None and attempt.outcome is not None
        args = (attempt.ended_at_ms, attempt.outcome.value, attempt.reason[:1024])
        await self._cas(tx, _END_ATTEMPT, *args, attempt.id, attempt.task_id)

    # -- events ---------------------------------------------------------------------------

    async def append(self, tx: Tx, task_id: str, events: Sequence[Event]) -> None:
        """The task's events, numbered already (from its row's ``event_sequence``, which
        the same transaction moves on)."""
        for event in events:
            await self._write(tx, _APPEND, rec.event_values(task_id, event), rec.EVENT)

    async def events(self, task_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        rows = await self._fetch(None, _EVENTS, task_id, after, limit)
        return [rec.event_from_row(row) for row in rows]
