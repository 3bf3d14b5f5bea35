"""Long-task records -> protobuf (the answers of LongTaskService and LongTaskAttemptService).
The domain never imports generated code; only ``longtasks/api`` does. Enums map by name
(``LONG_TASK_STATE_`` + the state's value in upper case, ...); the display payloads (stored
JSON text) become Structs through ``display_json`` only, so a damaged one shows empty."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from google.protobuf import duration_pb2, struct_pb2
from google.protobuf.message import DecodeError
from truerun.v1 import long_task_service_pb2 as pb

from coordinator.api.convert import timestamp
from longtasks.api.continuations import continuation_to_proto
from longtasks.domain.actions import format_handle
from longtasks.domain.continuations import Continuation, waiting_text
from longtasks.domain.display import display
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
from longtasks.domain.progress import progress, recovery_prompt
from longtasks.domain.resolutions import offered
from longtasks.domain.states import DecisionState, PlanAuthor, ProbeResult, TaskState
from longtasks.domain.text_commands import prompt
from longtasks.service.reads import TaskView
from longtasks.store.rows import display_json


def enum_number(enum: Any, prefix: str, value: StrEnum | None) -> Any:
    """The proto enum number of a domain value by name (UNSPECIFIED for None)."""
    if value is None:
        return 0
    return enum.Value(f"{prefix}_{value.value.upper()}")


def etag(task: Task) -> str:
    """A task's etag: its state version, as every command sends it back."""
    return str(task.state_version)


def struct_of(text: str | None) -> struct_pb2.Struct | None:
    """A stored JSON object as a Struct (None when missing, not an object, or unreadable)."""
    value = display_json(text)
    if not isinstance(value, dict):
        return None
    message = struct_pb2.Struct()
    try:
        message.update(value)
    except (TypeError, ValueError, DecodeError):  # a value a Struct cannot hold: show nothing
        return None
    return message


def _ts(ms: int | None) -> Any:
    return None if ms is None else timestamp(ms)


def evidence_to_proto(evidence: Evidence) -> pb.EvidenceRef:
    return pb.EvidenceRef(
        evidence_id=evidence.id,
        kind=evidence.kind,
        reference=evidence.reference,
        summary=evidence.summary,
        render=struct_of(evidence.render),
        effect_id=evidence.effect_id or "",
        step_id=evidence.step_id or "",
        criterion_id=evidence.criterion_id or "",
        unavailable=bool(evidence.unavailable_reason),
        unavailable_reason=evidence.unavailable_reason or "",
    )


def effect_to_proto(effect: Effect) -> pb.SideEffectRecord:
    receipt = None
    if effect.receipt is not None:
        got = effect.receipt
        receipt = pb.Receipt(
            external_id=got.external_id or "",
            target=got.target,
            time=timestamp(got.at_ms),
            summary=got.summary,
            detail=struct_of(got.detail),
        )
    return pb.SideEffectRecord(
        effect_id=effect.id,
        attempt_id=effect.attempt_id,
        try_no=effect.try_no,
        target=effect.target,
        summary=effect.summary,
        idempotency_key=effect.idempotency_key or "",
        record_time=timestamp(effect.recorded_at_ms),
        receipt=receipt,
    )


def step_to_proto(step: PlanStep, view: TaskView) -> pb.LongTaskStep:
    current = view.effect(step.intent_id)
    probe = None if step.probe is ProbeResult.NOT_PROBED else step.probe
    return pb.LongTaskStep(
        step_id=step.step_id,
        position=step.position,
        title=step.title,
        side_effect=enum_number(pb.SideEffectClass, "SIDE_EFFECT_CLASS", step.side_effect),
        state=enum_number(pb.StepState, "STEP_STATE", step.state),
        version=step.version,
        attempt_count=step.attempt_count,
        holder_attempt_id=step.holder or "",
        idempotency_key=step.idempotency_key or "",
        input_summary=step.input_summary,
        action=struct_of(step.action_spec),
        probe=struct_of(step.probe_spec),
        probe_result=enum_number(pb.ProbeResult, "PROBE_RESULT", probe),
        basis=step.basis.value if step.basis is not None else "",
        introduced_in=step.introduced_in,
        current_effect=effect_to_proto(current) if current is not None else None,
        effects=[effect_to_proto(e) for e in view.effects_of(step.step_id)],
        evidence=[evidence_to_proto(e) for e in view.evidence_of_step(step.step_id)],
        update_time=timestamp(step.updated_at_ms),
    )


def criterion_to_proto(record: CriterionRecord, view: TaskView) -> pb.Criterion:
    criterion = record.criterion
    return pb.Criterion(
        criterion_id=criterion.id,
        text=criterion.text,
        required=criterion.required,
        subjective=criterion.subjective,
        checker_kind=criterion.checker or "",
        checker=struct_of(record.checker_spec),
        author=criterion.author.value,
        user_edited=criterion.author is PlanAuthor.USER,
        result=enum_number(pb.CriterionResult, "CRITERION_RESULT", record.result),
        result_source=record.result_source or "",
        evidence=[evidence_to_proto(e) for e in view.evidence_of_criterion(criterion.id)],
    )


def decision_to_proto(decision: Decision, prompt_text: str = "") -> pb.Decision:
    """``prompt_text``: how to answer it from a chat (an open decision on a task read)."""
    options = display_json(decision.options)
    return pb.Decision(
        decision_id=decision.id,
        kind=decision.kind.value,
        state=decision.state.value,
        question=decision.question,
        options=[str(o) for o in options] if isinstance(options, list) else [],
        material=struct_of(decision.material),
        subject=decision.subject,
        repeat_count=decision.repeat_count,
        step_id=decision.step_id or "",
        answer=decision.answer or "",
        note=decision.note,
        answered_by=decision.answered_by or "",
        create_time=timestamp(decision.created_at_ms),
        answer_time=_ts(decision.answered_at_ms),
        prompt=prompt_text,
    )


def plan_to_proto(plan: PlanVersion) -> pb.PlanVersion:
    return pb.PlanVersion(
        version=plan.version,
        author=plan.author.value,
        reason=plan.reason,
        created_by=plan.created_by,
        create_time=timestamp(plan.created_at_ms),
        closed_state=plan.closed_state.value if plan.closed_state is not None else "",
    )


def attempt_to_proto(attempt: Attempt) -> pb.LongTaskAttempt:
    return pb.LongTaskAttempt(
        attempt_id=attempt.id,
        attempt_no=attempt.attempt_no,
        run_id=attempt.run_id,
        plan_version=attempt.plan_version,
        start_time=timestamp(attempt.started_at_ms),
        end_time=_ts(attempt.ended_at_ms),
        outcome=attempt.outcome.value if attempt.outcome is not None else "",
        reason=attempt.reason,
    )


def event_to_proto(event: Event) -> pb.LongTaskEvent:
    return pb.LongTaskEvent(
        sequence=event.sequence,
        type=event.type,
        message=event.message,
        from_state=event.from_state or "",
        to_state=event.to_state or "",
        plan_version=event.plan_version,
        step_id=event.step_id or "",
        attempt_id=event.attempt_id or "",
        decision_id=event.decision_id or "",
        actor_type=event.actor_type,
        actor_id=event.actor_id,
        create_time=timestamp(event.created_at_ms),
    )


def budget_to_proto(task: Task) -> pb.LongTaskBudget:
    budget = task.budget
    lifetime = None
    if budget.deadline_ms is not None:
        lifetime = duration_pb2.Duration()
        lifetime.FromMilliseconds(budget.deadline_ms - task.created_at_ms)
    return pb.LongTaskBudget(
        max_attempts=budget.max_attempts,
        attempts_used=budget.attempts_used,
        max_tokens=budget.max_tokens or 0,
        tokens_used=budget.tokens_used,
        lifetime=lifetime,
        deadline=_ts(budget.deadline_ms),
        max_corrections=task.max_corrections,
    )


def task_state(task: Task) -> Any:
    return enum_number(pb.LongTaskState, "LONG_TASK_STATE", task.state)


def task_summary(
    task: Task,
    constraints: tuple[str, ...],
    sources: tuple[str, ...],
    queue_position: int | None = None,
    continuation: Continuation | None = None,
) -> pb.LongTask:
    """The task without its steps, criteria, decisions, plan versions and attempts (a list
    entry); ``queue_position`` for a queued task; ``continuation``: the one holding it."""
    holds = continuation is not None and continuation.holds(task.state_version)
    waiting = waiting_text(continuation, continuation.due_ms) if continuation and holds else None
    shown = display(task.state, ahead=queue_position, waiting=waiting)
    return pb.LongTask(
        name=f"projects/{task.project_id}/longTasks/{task.id}",
        project_id=task.project_id,
        long_task_id=task.id,
        owner_id=task.owner_id,
        agent_id=task.agent_id or "",
        goal=task.goal,
        constraints=constraints,
        sources=sources,
        state=task_state(task),
        state_reason=task.state_reason,
        display_state=shown.shown.value,
        wait_kind=shown.wait_kind.value if shown.wait_kind is not None else "",
        display_label=shown.label,
        display_action=shown.action,
        etag=etag(task),
        plan_version=task.plan_version,
        budget=budget_to_proto(task),
        lease_attempt_id=task.lease.attempt_id if task.lease is not None else "",
        queue_position=queue_position or 0,
        created_by=task.created_by,
        create_time=timestamp(task.created_at_ms),
        update_time=timestamp(task.updated_at_ms),
        finish_time=_ts(task.finished_at_ms),
        handle=format_handle(task.handle),
        continuation=continuation_to_proto(continuation, task.state_version)
        if continuation is not None
        else None,
        source_run_id=task.source_run_id or "",
        source_ref=task.source_ref,
    )


def task_to_proto(view: TaskView) -> pb.LongTask:
    """The whole task: its current plan's steps and criteria, decisions, plans, attempts."""
    message = task_summary(
        view.task, view.constraints, view.sources, view.queue_position, view.continuation
    )
    message.steps.extend(step_to_proto(s, view) for s in view.steps)
    message.criteria.extend(criterion_to_proto(c, view) for c in view.criteria)
    task = view.task
    message.decisions.extend(
        decision_to_proto(
            d, prompt(task.handle, d, task.state_version) if d.state is DecisionState.OPEN else ""
        )
        for d in view.decisions
    )
    message.plan_versions.extend(plan_to_proto(p) for p in view.plans)
    message.attempts.extend(attempt_to_proto(a) for a in view.attempts)
    message.progress = progress(task.state, view.steps, view.criteria, view.decisions)
    message.recovery_prompt = recovery_prompt(
        task.state, task.state_reason, view.decisions, view.steps, view.effects
    )
    if task.state is TaskState.RECOVERY_REQUIRED:
        facts = [s.rules() for s in view.steps]
        message.recovery_resolutions.extend(r.value for r in offered(facts))
    return message
