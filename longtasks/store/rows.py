"""The task, its plan versions, steps and criteria <-> rows; with ``records.py`` the one
place that knows the columns (kernel/db/longtask_tables.py).

Every state field is read from its own column. The JSON columns (a task's constraints and
sources, a step's probe spec, a criterion's checker spec, a receipt's detail, an evidence
render summary, a decision's options and material) are display payloads: the mappers carry
them as the stored text, and only ``display_json`` parses one, for a surface, never for a
decision (tests/contract/test_longtask_store.py holds this).
"""

from __future__ import annotations

import json
from typing import Any

from kernel import json_bounds
from longtasks.domain.completion import Criterion
from longtasks.domain.model import Budget, CriterionRecord, Lease, PlanStep, PlanVersion, Task
from longtasks.domain.states import (
    Basis,
    CriterionResult,
    PlanAuthor,
    ProbeResult,
    SideEffect,
    StepState,
    TaskState,
)

TASK = (
    *("id", "project_id", "owner_id", "agent_id", "goal", "state", "state_version"),
    *("plan_version", "state_reason", "lease_attempt_id", "lease_run_id"),
    *("lease_expires_at_ms", "attempts_used", "max_attempts", "tokens_used", "max_tokens"),
    *("deadline_ms", "verify_interruptions", "max_verify_interruptions", "corrections_used"),
    *("max_corrections", "event_sequence", "created_by", "created_at_ms", "updated_at_ms"),
    *("finished_at_ms", "handle", "source_run_id", "source_ref"),
)
#: What a change of the task may write (its identity, handle and creation never change).
TASK_MUTABLE = tuple(
    c
    for c in TASK
    if c
    not in (
        *("id", "project_id", "owner_id", "created_by", "created_at_ms", "handle"),
        *("source_run_id", "source_ref"),
    )
)
#: The task's display payloads, written at creation, read only through ``display_json``.
TASK_DISPLAY = ("constraints", "sources")
PLAN = (
    *("task_id", "version", "author", "reason", "created_by", "created_at_ms"),
    *("closed_state", "closed_at_ms"),
)
STEP = (
    *("task_id", "plan_version", "step_id", "position", "title", "side_effect", "state"),
    *("version", "attempt_count", "holder_attempt_id", "intent_id", "receipt_id", "probe"),
    *("basis", "granted_by", "idempotency_key", "probe_spec", "action_spec"),
    "input_summary",
    *("introduced_in", "updated_at_ms"),
)
STEP_MUTABLE = tuple(c for c in STEP if c not in ("task_id", "plan_version", "step_id"))
CRITERION = (
    *("task_id", "plan_version", "criterion_id", "position", "text", "required"),
    *("subjective", "checker_kind", "checker_spec", "author", "user_edited", "written_in"),
    *("result", "result_source", "result_at_ms"),
)


def display_json(text: str | None) -> Any:
    """A display payload for a surface; None when it is missing or unreadable (a display
    payload never decides anything, so a damaged one only shows as unavailable)."""
    if not text:
        return None
    try:
        value = json_bounds.stored(text)  # too deep to render: a note, never parsed
    except (ValueError, RecursionError):
        return None
    return None if isinstance(value, dict) and json_bounds.NOTE_KEY in value else value


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def task_values(task: Task) -> dict[str, Any]:
    lease, budget = task.lease, task.budget
    return {
        "id": task.id,
        "project_id": task.project_id,
        "owner_id": task.owner_id,
        "agent_id": task.agent_id,
        "goal": task.goal,
        "state": task.state.value,
        "state_version": task.state_version,
        "plan_version": task.plan_version,
        "state_reason": task.state_reason[:1024],
        "lease_attempt_id": lease.attempt_id if lease else None,
        "lease_run_id": lease.run_id if lease else None,
        "lease_expires_at_ms": lease.expires_at_ms if lease else None,
        "attempts_used": budget.attempts_used,
        "max_attempts": budget.max_attempts,
        "tokens_used": budget.tokens_used,
        "max_tokens": budget.max_tokens,
        "deadline_ms": budget.deadline_ms,
        "verify_interruptions": task.verify_interruptions,
        "max_verify_interruptions": task.max_verify_interruptions,
        "corrections_used": task.corrections_used,
        "max_corrections": task.max_corrections,
        "event_sequence": task.event_sequence,
        "created_by": task.created_by,
        "created_at_ms": task.created_at_ms,
        "updated_at_ms": task.updated_at_ms,
        "finished_at_ms": task.finished_at_ms,
        "handle": task.handle,
        "source_run_id": task.source_run_id,
        "source_ref": task.source_ref[:2048],
    }


def task_from_row(row: Any) -> Task:
    lease = None
    if row["lease_attempt_id"] is not None:
        lease = Lease(row["lease_attempt_id"], row["lease_run_id"], int(row["lease_expires_at_ms"]))
    return Task(
        id=row["id"],
        project_id=row["project_id"],
        owner_id=row["owner_id"],
        goal=row["goal"],
        state=TaskState(row["state"]),
        state_version=int(row["state_version"]),
        plan_version=int(row["plan_version"]),
        budget=Budget(
            max_attempts=int(row["max_attempts"]),
            attempts_used=int(row["attempts_used"]),
            max_tokens=opt_int(row["max_tokens"]),
            tokens_used=int(row["tokens_used"]),
            deadline_ms=opt_int(row["deadline_ms"]),
        ),
        agent_id=row["agent_id"],
        state_reason=row["state_reason"],
        lease=lease,
        verify_interruptions=int(row["verify_interruptions"]),
        max_verify_interruptions=int(row["max_verify_interruptions"]),
        corrections_used=int(row["corrections_used"]),
        max_corrections=int(row["max_corrections"]),
        event_sequence=int(row["event_sequence"]),
        created_by=row["created_by"],
        created_at_ms=int(row["created_at_ms"]),
        updated_at_ms=int(row["updated_at_ms"]),
        finished_at_ms=opt_int(row["finished_at_ms"]),
        handle=int(row["handle"]),
        source_run_id=row["source_run_id"],
        source_ref=row["source_ref"] or "",
    )


def plan_values(plan: PlanVersion) -> dict[str, Any]:
    return {
        "task_id": plan.task_id,
        "version": plan.version,
        "author": plan.author.value,
        "reason": plan.reason[:2048],
        "created_by": plan.created_by,
        "created_at_ms": plan.created_at_ms,
        "closed_state": plan.closed_state.value if plan.closed_state else None,
        "closed_at_ms": plan.closed_at_ms,
    }


def plan_from_row(row: Any) -> PlanVersion:
    closed = row["closed_state"]
    return PlanVersion(
        task_id=row["task_id"],
        version=int(row["version"]),
        author=PlanAuthor(row["author"]),
        reason=row["reason"],
        created_by=row["created_by"],
        created_at_ms=int(row["created_at_ms"]),
        closed_state=TaskState(closed) if closed is not None else None,
        closed_at_ms=opt_int(row["closed_at_ms"]),
    )


def step_values(step: PlanStep) -> dict[str, Any]:
    return {
        "task_id": step.task_id,
        "plan_version": step.plan_version,
        "step_id": step.step_id,
        "position": step.position,
        "title": step.title[:512],
        "side_effect": step.side_effect.value,
        "state": step.state.value,
        "version": step.version,
        "attempt_count": step.attempt_count,
        "holder_attempt_id": step.holder,
        "intent_id": step.intent_id,
        "receipt_id": step.receipt_id,
        "probe": step.probe.value,
        "basis": step.basis.value if step.basis else None,
        "granted_by": step.granted_by,
        "idempotency_key": step.idempotency_key,
        "probe_spec": step.probe_spec,
        "action_spec": step.action_spec,
        "input_summary": step.input_summary,
        "introduced_in": step.introduced_in,
        "updated_at_ms": step.updated_at_ms,
    }


def step_from_row(row: Any) -> PlanStep:
    basis = row["basis"]
    return PlanStep(
        task_id=row["task_id"],
        plan_version=int(row["plan_version"]),
        step_id=row["step_id"],
        position=int(row["position"]),
        title=row["title"],
        side_effect=SideEffect(row["side_effect"]),
        state=StepState(row["state"]),
        version=int(row["version"]),
        introduced_in=int(row["introduced_in"]),
        attempt_count=int(row["attempt_count"]),
        holder=row["holder_attempt_id"],
        intent_id=row["intent_id"],
        receipt_id=row["receipt_id"],
        probe=ProbeResult(row["probe"]),
        basis=Basis(basis) if basis is not None else None,
        granted_by=row["granted_by"],
        idempotency_key=row["idempotency_key"],
        probe_spec=row["probe_spec"],
        action_spec=row["action_spec"],
        input_summary=row["input_summary"],
        updated_at_ms=int(row["updated_at_ms"]),
    )


def criterion_values(task_id: str, version: int, record: CriterionRecord) -> dict[str, Any]:
    c = record.criterion
    return {
        "task_id": task_id,
        "plan_version": version,
        "criterion_id": c.id,
        "position": record.position,
        "text": c.text,
        "required": c.required,
        "subjective": c.subjective,
        "checker_kind": c.checker,
        "checker_spec": record.checker_spec,
        "author": c.author.value,
        "user_edited": c.author is PlanAuthor.USER,
        "written_in": c.plan_version,
        "result": record.result.value,
        "result_source": record.result_source,
        "result_at_ms": record.result_at_ms,
    }


def criterion_from_row(row: Any) -> CriterionRecord:
    criterion = Criterion(
        id=row["criterion_id"],
        text=row["text"],
        checker=row["checker_kind"],
        required=bool(row["required"]),
        author=PlanAuthor(row["author"]),
        plan_version=int(row["written_in"]),
    )
    return CriterionRecord(
        criterion,
        position=int(row["position"]),
        checker_spec=row["checker_spec"],
        result=CriterionResult(row["result"]),
        result_source=row["result_source"],
        result_at_ms=opt_int(row["result_at_ms"]),
    )
