"""The read model of a long task (docs/long-tasks.md "API"): one task with everything a
surface shows, assembled from the store's reads only. Nothing here writes, and nothing here
decides: the display folding is ``domain/display.py``'s, and the display payloads are
parsed only through ``display_json`` (a damaged one shows as unavailable).

The parts are read one after another outside a transaction, so under concurrent writes a
view may mix two neighbouring versions of the task; every command still compares the etag
it sends, so a stale view can only lead to a refused command, never to a lost write."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernel.errors import LongTaskNotFound
from longtasks.domain.continuations import Continuation, waiting_text
from longtasks.domain.display import Display, display
from longtasks.domain.model import (
    Attempt,
    CriterionRecord,
    Decision,
    Effect,
    Event,
    Evidence,
    PlanStep,
    PlanVersion,
    Task,
)
from longtasks.domain.states import StepState, TaskState
from longtasks.store.watcher_sql import WatcherSql

#: Steps an attempt need not work on any more.
SETTLED = frozenset({StepState.COMPLETED, StepState.SKIPPED})


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as every surface shows it: the current plan version's steps and criteria, the
    task's side effects, evidence, decisions, plan versions and attempts."""

    task: Task
    constraints: tuple[str, ...]
    sources: tuple[str, ...]
    display: Display
    plans: tuple[PlanVersion, ...]
    steps: tuple[PlanStep, ...]
    criteria: tuple[CriterionRecord, ...]
    effects: tuple[Effect, ...]  # oldest first
    evidence: tuple[Evidence, ...]
    decisions: tuple[Decision, ...]  # newest first
    attempts: tuple[Attempt, ...]  # oldest first
    queue_position: int | None = None  # queued: how many of the owner's tasks start first
    continuation: Continuation | None = None  # the last one asked for, if any

    def effects_of(self, step_id: str) -> list[Effect]:
        return [e for e in self.effects if e.step_id == step_id]

    def effect(self, effect_id: str | None) -> Effect | None:
        return next((e for e in self.effects if e.id == effect_id), None)

    def evidence_of_step(self, step_id: str) -> list[Evidence]:
        return [e for e in self.evidence if e.step_id == step_id]

    def evidence_of_criterion(self, criterion_id: str) -> list[Evidence]:
        return [e for e in self.evidence if e.criterion_id == criterion_id]

    def current_step_id(self) -> str | None:
        """The first step not completed or skipped (None: every step is settled)."""
        return next((s.step_id for s in self.steps if s.state not in SETTLED), None)

    def attempt(self, attempt_id: str) -> Attempt | None:
        return next((a for a in self.attempts if a.id == attempt_id), None)

    def previous_failure(self, attempt: Attempt) -> str:
        """Why the attempt before ``attempt`` ended ("" for the first)."""
        before = [a for a in self.attempts if a.attempt_no < attempt.attempt_no]
        return before[-1].reason if before else ""


def strings(value: Any) -> tuple[str, ...]:
    """A display payload that should be a list of strings (anything else shows as none)."""
    if not isinstance(value, list):
        return ()
    return tuple(str(item) for item in value)


class TaskReads:
    """The long-task reads for the API (over the store's read methods)."""

    def __init__(self, sql: WatcherSql) -> None:
        self._sql = sql

    @property
    def sql(self) -> WatcherSql:
        """The statements these reads use (the action contract resolves handles with them)."""
        return self._sql

    async def find(self, task_id: str) -> Task | None:
        return await self._sql.get_task(task_id)

    async def task(self, task_id: str) -> Task:
        task = await self._sql.get_task(task_id)
        if task is None:
            raise LongTaskNotFound(f"long task {task_id} does not exist", task_id=task_id)
        return task

    async def view(self, task_id: str) -> TaskView:
        task = await self.task(task_id)
        payloads = await self._sql.task_display(task_id)
        effects = await self._sql.effects(None, task_id)
        decisions = await self._sql.decisions(None, task_id)
        continuation = await self._sql.continuation(None, task_id)
        waiting = None
        if continuation is not None and continuation.holds(task.state_version):
            waiting = waiting_text(continuation, continuation.due_ms)
        ahead = None if waiting is not None else await self.queue_position(task)
        return TaskView(
            task=task,
            constraints=strings(payloads.get("constraints")),
            sources=strings(payloads.get("sources")),
            display=display(task.state, ahead=ahead, waiting=waiting),
            plans=tuple(await self._sql.plans(task_id)),
            steps=tuple(await self._sql.steps(None, task_id, task.plan_version)),
            criteria=tuple(await self._sql.criteria(None, task_id, task.plan_version)),
            effects=tuple(sorted(effects, key=lambda e: (e.recorded_at_ms, e.try_no, e.id))),
            evidence=tuple(await self._sql.evidence(None, task_id)),
            decisions=tuple(sorted(decisions, key=lambda d: (d.created_at_ms, d.id))[::-1]),
            attempts=tuple(await self._sql.attempts(None, task_id)),
            queue_position=ahead,
            continuation=continuation,
        )

    async def queue_position(self, task: Task) -> int | None:
        """A queued task's place in its owner's queue (None: it is not queued)."""
        if task.state is not TaskState.QUEUED:
            return None
        return await self._sql.queued_ahead(task)

    async def page(
        self,
        project_id: str,
        owner_id: str | None,
        active_only: bool,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[tuple[Task, tuple[str, ...], tuple[str, ...], int | None, Continuation | None]]:
        """A project's tasks, newest first, each with its constraints, sources, and for a
        queued task its queue position or the continuation holding it (one more read per
        queued task only)."""
        rows = await self._sql.tasks_of_project(project_id, owner_id, active_only, after, limit)
        entries = []
        for task, payloads in rows:
            held = None
            if task.state is TaskState.QUEUED:
                held = await self._sql.continuation(None, task.id)
                held = held if held is not None and held.holds(task.state_version) else None
            ahead = None if held is not None else await self.queue_position(task)
            constraints = strings(payloads.get("constraints"))
            entries.append((task, constraints, strings(payloads.get("sources")), ahead, held))
        return entries

    async def events(self, task_id: str, after: int, limit: int) -> Sequence[Event]:
        await self.task(task_id)
        return await self._sql.events(task_id, after, limit)

    async def decision(self, task_id: str, decision_id: str) -> Decision:
        for decision in await self._sql.decisions(None, task_id):
            if decision.id == decision_id:
                return decision
        raise LongTaskNotFound(
            f"long task {task_id} has no decision {decision_id}",
            task_id=task_id,
            decision_id=decision_id,
        )

    async def unfinished_of_owner(self, owner_id: str) -> int:
        return await self._sql.unfinished_of_owner(owner_id)

    async def attempt_of_run(self, run_id: str) -> Attempt | None:
        return await self._sql.attempt_of_run(run_id)
