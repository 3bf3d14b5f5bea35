"""The records around a plan <-> rows: side effects (intent + receipt), evidence references,
decisions, attempts and events (kernel/db/longtask_tables.py). As in ``rows.py``, every
state field comes from its column; JSON columns are carried as the stored text.
"""

from __future__ import annotations

from typing import Any

from longtasks.domain.model import Attempt, Decision, Effect, Event, Evidence, Receipt
from longtasks.domain.states import AttemptOutcome, DecisionKind, DecisionState
from longtasks.store.rows import opt_int

EFFECT = (
    *("id", "task_id", "step_id", "plan_version", "attempt_id", "try_no", "target"),
    *("summary", "idempotency_key", "intent_recorded_at_ms", "external_id"),
    *("receipt_target", "receipt_at_ms", "receipt_summary", "receipt_detail"),
    "receipt_recorded_at_ms",
)
#: The receipt half, written once onto its intent's row.
RECEIPT = EFFECT[-6:]
EVIDENCE = (
    *("id", "task_id", "step_id", "criterion_id", "kind", "reference", "summary"),
    *("render", "effect_id", "attempt_id", "created_at_ms", "unavailable_reason"),
)
DECISION = (
    *("id", "task_id", "kind", "state", "question", "options", "material", "subject"),
    *("step_id", "attempt_id", "plan_version", "task_version", "repeat_count", "answer"),
    *("note", "answered_by", "answered_at_ms", "created_at_ms"),
)
#: What answering or expiring a decision writes.
DECISION_ANSWER = ("state", "answer", "note", "answered_by", "answered_at_ms")
ATTEMPT = (
    *("id", "task_id", "attempt_no", "run_id", "plan_version", "started_at_ms"),
    *("ended_at_ms", "outcome", "reason"),
)
EVENT = (
    *("task_id", "sequence", "type", "plan_version", "step_id", "attempt_id"),
    *("decision_id", "from_state", "to_state", "actor_type", "actor_id", "message"),
    "created_at_ms",
)


def effect_values(effect: Effect) -> dict[str, Any]:
    r = effect.receipt
    return {
        "id": effect.id,
        "task_id": effect.task_id,
        "step_id": effect.step_id,
        "plan_version": effect.plan_version,
        "attempt_id": effect.attempt_id,
        "try_no": effect.try_no,
        "target": effect.target[:1024],
        "summary": effect.summary,
        "idempotency_key": effect.idempotency_key,
        "intent_recorded_at_ms": effect.recorded_at_ms,
        "external_id": r.external_id if r else None,
        "receipt_target": r.target[:1024] if r else None,
        "receipt_at_ms": r.at_ms if r else None,
        "receipt_summary": r.summary if r else None,
        "receipt_detail": r.detail if r else "{}",
        "receipt_recorded_at_ms": r.recorded_at_ms if r else None,
    }


def effect_from_row(row: Any) -> Effect:
    receipt = None
    if row["receipt_recorded_at_ms"] is not None:
        receipt = Receipt(
            external_id=row["external_id"],
            target=row["receipt_target"],
            at_ms=int(row["receipt_at_ms"]),
            summary=row["receipt_summary"],
            detail=row["receipt_detail"],
            recorded_at_ms=int(row["receipt_recorded_at_ms"]),
        )
    return Effect(
        id=row["id"],
        task_id=row["task_id"],
        step_id=row["step_id"],
        plan_version=int(row["plan_version"]),
        attempt_id=row["attempt_id"],
        try_no=int(row["try_no"]),
        target=row["target"],
        summary=row["summary"],
        idempotency_key=row["idempotency_key"],
        recorded_at_ms=int(row["intent_recorded_at_ms"]),
        receipt=receipt,
    )


def evidence_values(e: Evidence) -> dict[str, Any]:
    return {
        "id": e.id,
        "task_id": e.task_id,
        "step_id": e.step_id,
        "criterion_id": e.criterion_id,
        "kind": e.kind[:64],
        "reference": e.reference[:2048],
        "summary": e.summary[:2048],
        "render": e.render,
        "effect_id": e.effect_id,
        "attempt_id": e.attempt_id,
        "created_at_ms": e.created_at_ms,
        "unavailable_reason": e.unavailable_reason,
    }


def evidence_from_row(row: Any) -> Evidence:
    return Evidence(
        id=row["id"],
        task_id=row["task_id"],
        kind=row["kind"],
        reference=row["reference"],
        summary=row["summary"],
        step_id=row["step_id"],
        criterion_id=row["criterion_id"],
        render=row["render"],
        effect_id=row["effect_id"],
        attempt_id=row["attempt_id"],
        created_at_ms=int(row["created_at_ms"]),
        unavailable_reason=row["unavailable_reason"],
    )


def decision_values(d: Decision) -> dict[str, Any]:
    return {
        "id": d.id,
        "task_id": d.task_id,
        "kind": d.kind.value,
        "state": d.state.value,
        "question": d.question,
        "options": d.options,
        "material": d.material,
        "subject": d.subject[:512],
        "step_id": d.step_id,
        "attempt_id": d.attempt_id,
        "plan_version": d.plan_version,
        "task_version": d.task_version,
        "repeat_count": d.repeat_count,
        "answer": d.answer[:256] if d.answer is not None else None,
        "note": d.note,
        "answered_by": d.answered_by,
        "answered_at_ms": d.answered_at_ms,
        "created_at_ms": d.created_at_ms,
    }


def decision_from_row(row: Any) -> Decision:
    return Decision(
        id=row["id"],
        task_id=row["task_id"],
        kind=DecisionKind(row["kind"]),
        state=DecisionState(row["state"]),
        question=row["question"],
        plan_version=int(row["plan_version"]),
        task_version=int(row["task_version"]),
        created_at_ms=int(row["created_at_ms"]),
        options=row["options"],
        material=row["material"],
        subject=row["subject"],
        step_id=row["step_id"],
        attempt_id=row["attempt_id"],
        repeat_count=int(row["repeat_count"]),
        answer=row["answer"],
        note=row["note"],
        answered_by=row["answered_by"],
        answered_at_ms=opt_int(row["answered_at_ms"]),
    )


def attempt_values(a: Attempt) -> dict[str, Any]:
    return {
        "id": a.id,
        "task_id": a.task_id,
        "attempt_no": a.attempt_no,
        "run_id": a.run_id,
        "plan_version": a.plan_version,
        "started_at_ms": a.started_at_ms,
        "ended_at_ms": a.ended_at_ms,
        "outcome": a.outcome.value if a.outcome else None,
        "reason": a.reason[:1024],
    }


def attempt_from_row(row: Any) -> Attempt:
    outcome = row["outcome"]
    return Attempt(
        id=row["id"],
        task_id=row["task_id"],
        attempt_no=int(row["attempt_no"]),
        run_id=row["run_id"],
        plan_version=int(row["plan_version"]),
        started_at_ms=int(row["started_at_ms"]),
        ended_at_ms=opt_int(row["ended_at_ms"]),
        outcome=AttemptOutcome(outcome) if outcome is not None else None,
        reason=row["reason"],
    )


def event_values(task_id: str, e: Event) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "sequence": e.sequence,
        "type": e.type,
        "plan_version": e.plan_version,
        "step_id": e.step_id,
        "attempt_id": e.attempt_id,
        "decision_id": e.decision_id,
        "from_state": e.from_state,
        "to_state": e.to_state,
        "actor_type": e.actor_type,
        "actor_id": e.actor_id,
        "message": e.message[:1024],
        "created_at_ms": e.created_at_ms,
    }


def event_from_row(row: Any) -> Event:
    return Event(
        type=row["type"],
        message=row["message"],
        plan_version=int(row["plan_version"]),
        step_id=row["step_id"],
        attempt_id=row["attempt_id"],
        decision_id=row["decision_id"],
        from_state=row["from_state"],
        to_state=row["to_state"],
        sequence=int(row["sequence"]),
        actor_type=row["actor_type"],
        actor_id=row["actor_id"],
        created_at_ms=int(row["created_at_ms"]),
    )
