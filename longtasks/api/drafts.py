"""Protobuf drafts -> the door's inputs (``NewTask``, ``StepDraft``, ``NewCriterion``,
``NewEvidence``, ``ReceiptIn``), checked: anything malformed is INVALID_ARGUMENT with a
clear message before anything is read or written. A Struct becomes the stored JSON text
(``action_spec``, ``probe_spec``, ``checker_spec``, a receipt's ``detail``, an evidence's
``render``, a decision's ``material``): display payloads nothing decides on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2
from truerun.v1 import long_task_service_pb2 as pb

from coordinator.api import validation
from coordinator.domain.redaction import secret_values
from kernel import json_bounds
from kernel.errors import InvalidArgument
from longtasks.domain.checks import checker_kind_refusal
from longtasks.domain.model import StepDraft
from longtasks.domain.plans import key_required, keyless
from longtasks.domain.states import SideEffect
from longtasks.service.inputs import NewCriterion, NewEvidence, NewTask, ReceiptIn
from longtasks.store.rows import dumps

MAX_GOAL = 8192
MAX_TEXT = 2048
MAX_STEPS = 200
MAX_CRITERIA = 100
MAX_LIST = 64  # constraints, sources, options, evidence of one call
MAX_STRUCT_BYTES = 64 * 1024

_SIDE_EFFECTS = {
    pb.SideEffectClass.Value(f"SIDE_EFFECT_CLASS_{s.value.upper()}"): s for s in SideEffect
}


def text(value: str, field: str, limit: int = MAX_TEXT, required: bool = False) -> str:
    if required and not value.strip():
        raise InvalidArgument(f"{field} is required")
    if len(value) > limit:
        raise InvalidArgument(f"{field} is longer than {limit} characters")
    return value


MAX_SOURCE_REF = 2048


def source_ref(value: str) -> str:
    """Where a task was asked for (a chat thread's URL): shown on every notice and posted to
    webhooks, so it must hold no secret (a URL with a token in it is refused)."""
    ref = text(value.strip(), "source_ref", MAX_SOURCE_REF)
    if secret_values(ref):
        raise InvalidArgument("source_ref looks like it holds a secret; give one without it")
    return ref


def texts(values: Sequence[str], field: str) -> tuple[str, ...]:
    if len(values) > MAX_LIST:
        raise InvalidArgument(f"{field} has more than {MAX_LIST} entries")
    return tuple(text(v, f"{field} entry") for v in values)


def _whole(value: Any) -> Any:
    """A Struct's numbers are all doubles: whole ones are kept as integers, so a stored
    payload reads as it was written (``"timeout_s": 30``, not ``30.0``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def json_text(message: struct_pb2.Struct, field: str) -> str:
    """A Struct as the stored JSON text ("{}" when empty), at most 64 KiB, and within the
    input bounds (depth, keys/items, strings: kernel/json_bounds.py) so every reader can
    render it; nothing is written otherwise."""
    value = _whole(json_format.MessageToDict(message))
    stored = dumps(value)
    if len(stored.encode()) > MAX_STRUCT_BYTES:
        raise InvalidArgument(f"{field} is larger than {MAX_STRUCT_BYTES} bytes")
    json_bounds.check(value, json_bounds.current(), field)
    return stored


def _ids(ids: Sequence[str], what: str) -> None:
    for value in ids:
        validation.name(value, f"{what} id")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise InvalidArgument(f"{what} ids must be unique; given twice: {', '.join(twice)}")


def step_draft(draft: pb.StepDraft) -> StepDraft:
    where = f"step {draft.step_id}"
    side_effect = _SIDE_EFFECTS.get(draft.side_effect)
    if side_effect is None:
        raise InvalidArgument(
            f"{where}: side_effect is required (pure, idempotent, queryable or non_idempotent)"
        )
    key = text(draft.idempotency_key, f"{where}: idempotency_key", 256) or None
    if keyless(side_effect, key):
        # refused here, naming the step, before anything is read: an idempotent step is
        # retried by its class alone, so only a stable key keeps the retry harmless
        # (docs/long-tasks.md "3. Steps"); the door checks it again (plans.plan_refusal)
        raise InvalidArgument(key_required(draft.step_id), step_id=draft.step_id)
    return StepDraft(
        step_id=draft.step_id,
        title=text(draft.title, f"{where}: title", required=True),
        side_effect=side_effect,
        idempotency_key=key,
        probe_spec=json_text(draft.probe, f"{where}: probe"),
        input_summary=text(draft.input_summary, f"{where}: input_summary"),
        action_spec=json_text(draft.action, f"{where}: action"),
    )


def step_drafts(drafts: Sequence[pb.StepDraft], required: bool) -> tuple[StepDraft, ...] | None:
    """The steps of a plan (None: none given and none required: keep the current ones)."""
    if not drafts:
        if required:
            raise InvalidArgument("a plan needs at least one step")
        return None
    if len(drafts) > MAX_STEPS:
        raise InvalidArgument(f"a plan has at most {MAX_STEPS} steps")
    _ids([d.step_id for d in drafts], "step")
    return tuple(step_draft(d) for d in drafts)


def criterion_draft(draft: pb.CriterionDraft) -> NewCriterion:
    where = f"criterion {draft.criterion_id}"
    kind = draft.checker_kind or None
    refused = checker_kind_refusal(kind)
    if refused is not None:
        raise InvalidArgument(f"{where}: {refused}")
    return NewCriterion(
        criterion_id=draft.criterion_id,
        text=text(draft.text, f"{where}: text", required=True),
        checker_kind=kind,
        checker_spec=json_text(draft.checker, f"{where}: checker"),
        required=not draft.optional,
    )


def criterion_drafts(
    drafts: Sequence[pb.CriterionDraft],
) -> tuple[NewCriterion, ...] | None:
    """The criteria of a plan (None: none given: keep the current ones)."""
    if not drafts:
        return None
    if len(drafts) > MAX_CRITERIA:
        raise InvalidArgument(f"a plan has at most {MAX_CRITERIA} criteria")
    _ids([d.criterion_id for d in drafts], "criterion")
    return tuple(criterion_draft(d) for d in drafts)


def new_task(draft: pb.LongTaskDraft) -> NewTask:
    """A task as its creator asks for it; unset budget fields take the defaults."""
    project = validation.name(draft.project_id, "project_id") or ""
    owner = validation.name(draft.owner_id, "owner_id") or ""
    steps = step_drafts(draft.steps, required=True)
    assert steps is not None
    budget = draft.budget
    lifetime_ms = None
    if budget.HasField("lifetime"):
        lifetime_ms = budget.lifetime.ToMilliseconds()
        if lifetime_ms <= 0:
            raise InvalidArgument("budget.lifetime must be positive")
    for value, field in ((budget.max_attempts, "max_attempts"), (budget.max_tokens, "max_tokens")):
        if value < 0:
            raise InvalidArgument(f"budget.{field} may not be negative")
    if not 0 <= budget.max_corrections <= 20:
        raise InvalidArgument("budget.max_corrections must be between 0 and 20")
    extra: dict[str, Any] = {}
    if budget.max_attempts:
        extra["max_attempts"] = validation.in_range(
            budget.max_attempts, "budget.max_attempts", 1, 1000
        )
    if budget.max_corrections:
        extra["max_corrections"] = budget.max_corrections
    return NewTask(
        project_id=project,
        owner_id=owner,
        goal=text(draft.goal, "goal", MAX_GOAL, required=True),
        steps=steps,
        criteria=criterion_drafts(draft.criteria) or (),
        constraints=texts(draft.constraints, "constraints"),
        sources=texts(draft.sources, "sources"),
        source_ref=source_ref(draft.source_ref),
        agent_id=validation.name(draft.agent_id, "agent_id", required=False),
        task_id=validation.name(draft.long_task_id, "long_task_id", required=False),
        max_tokens=budget.max_tokens or None,
        lifetime_ms=lifetime_ms,
        **extra,
    )


def evidence_in(refs: Sequence[pb.EvidenceRef]) -> tuple[NewEvidence, ...]:
    if len(refs) > MAX_LIST:
        raise InvalidArgument(f"at most {MAX_LIST} evidence references in one call")
    return tuple(
        NewEvidence(
            kind=text(ref.kind, "evidence kind", 64, required=True),
            reference=text(ref.reference, "evidence reference", required=True),
            summary=text(ref.summary, "evidence summary", required=True),
            render=json_text(ref.render, "evidence render"),
            effect_id=ref.effect_id or None,
        )
        for ref in refs
    )


def receipt_in(receipt: pb.Receipt) -> ReceiptIn:
    if not receipt.HasField("time"):
        raise InvalidArgument("receipt.time is required: the outside world's timestamp")
    return ReceiptIn(
        target=text(receipt.target, "receipt.target", required=True),
        at_ms=receipt.time.ToMilliseconds(),
        summary=text(receipt.summary, "receipt.summary", required=True),
        external_id=text(receipt.external_id, "receipt.external_id", 512) or None,
        detail=json_text(receipt.detail, "receipt.detail"),
    )
