"""The rows and run notes a promotion writes (``promotion.py``), built from what the runtime
sent: the absorbed calls' intents, receipts and the evidence citing them, the criteria, and
the task's first events as the transition table allows them."""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from kernel.errors import InvalidArgument
from longtasks.domain.activation import AbsorbedCall, Path, Verdict, absorbed_words
from longtasks.domain.completion import Criterion
from longtasks.domain.model import CriterionRecord, Effect, Event, Evidence, Receipt, StepDraft
from longtasks.domain.rules import Continued, Refused, TaskCommand, decide_task
from longtasks.domain.states import TaskState
from longtasks.service.inputs import NewTask, ReceiptIn

C = TaskCommand


@dataclass(frozen=True, slots=True)
class Promotion:
    """What the runtime sends to promote its run: the task (project, owner and agent are
    the run's), the calls already executed in order with their receipts (by step id), how
    the decision was reached."""

    new: NewTask
    calls: tuple[AbsorbedCall, ...]
    receipts: dict[str, ReceiptIn] = field(default_factory=dict)
    path: Path = Path.LAZY
    reason: str = ""
    confidence: float | None = None


def note(run_id: str, actor: Actor, type_: str, **details: object) -> c.NoteRun:
    return c.NoteRun(run_id, actor, type=type_, details=dict(details))


def verdict_details(
    verdict: Verdict, path: Path, reason: str, confidence: float | None
) -> dict[str, object]:
    details: dict[str, object] = {"verdict": verdict.value, "path": path.value, "reason": reason}
    if confidence is not None:
        details["confidence"] = confidence
    return details


def as_draft(call: AbsorbedCall) -> StepDraft:
    return StepDraft(call.step_id, call.title, call.side_effect, call.idempotency_key)


def first_events(run_id: str, promotion: Promotion, attempt_id: str) -> list[Event]:
    """create, enqueue and attempt_started as the transition table allows them (the run is
    already working: it is the first attempt), then what was absorbed."""
    events: list[Event] = []
    state: TaskState | None = None
    for command, why in (
        (C.CREATE, f"created by promoting run {run_id} ({promotion.path}): {promotion.reason}"),
        (C.ENQUEUE, "queued at once: its run is already working"),
        (C.ATTEMPT_STARTED, f"attempt 1 is the promoted run {run_id}"),
    ):
        moved = decide_task(state, command)
        if isinstance(moved, Refused | Continued):  # the table changed: refuse, write nothing
            raise InvalidArgument(f"a promotion cannot {command} from {state}")
        attempt = attempt_id if command is C.ATTEMPT_STARTED else None
        before = state.value if state is not None else None
        events.append(Event(command.value, why[:1024], 1, None, attempt, None, before, moved.after))
        state = moved.after
    words = f"run {run_id}: {absorbed_words(promotion.calls)}"
    events.append(Event("run_absorbed", words[:1024], 1, attempt_id=attempt_id))
    return events


def absorbed_effect(
    effect_id: str, task_id: str, attempt_id: str, call: AbsorbedCall, now: int
) -> Effect:
    """The absorbed call's intent: it ran, so it may have had its effect."""
    return Effect(
        id=effect_id,
        task_id=task_id,
        step_id=call.step_id,
        plan_version=1,
        attempt_id=attempt_id,
        try_no=1,
        target=call.target,
        summary=call.summary,
        idempotency_key=call.idempotency_key,
        recorded_at_ms=now,
    )


def stored_receipt(receipt: ReceiptIn, now: int) -> Receipt:
    return Receipt(
        receipt.external_id, receipt.target, receipt.at_ms, receipt.summary, receipt.detail, now
    )


def receipt_evidence(evidence_id: str, effect: Effect, receipt: ReceiptIn, now: int) -> Evidence:
    """The completed absorbed step's evidence: its receipt."""
    return Evidence(
        id=evidence_id,
        task_id=effect.task_id,
        kind="receipt",
        reference=receipt.external_id or receipt.target,
        summary=f"receipt of the absorbed call: {receipt.summary}"[:2048],
        step_id=effect.step_id,
        effect_id=effect.id,
        attempt_id=effect.attempt_id,
        created_at_ms=now,
    )


def criteria_of(new: NewTask) -> list[CriterionRecord]:
    return [
        CriterionRecord(
            Criterion(n.criterion_id, n.text, n.checker_kind, n.required, new.author, 1),
            position,
            n.checker_spec,
        )
        for position, n in enumerate(new.criteria, 1)
    ]
