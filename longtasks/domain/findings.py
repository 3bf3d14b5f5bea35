"""Two release-metric findings the door notes as events, decided here over plain records
(docs/long-tasks.md "Release metrics"):

- a **duplicate side effect**: a receipt recorded for an effect whose intent key already
  has a receipt from another try of the same task, unless both receipts name the same
  external id (an idempotent service answering a retry with the first effect is one
  effect). The key is the intent's idempotency key, or without one the step of its plan
  version (a keyless step's tries are one intent);
- a **disputed completion**: the verifier finds a criterion not passed whose ``passed``
  result is the one a completion stood on (recorded before a plan version closed
  ``completed``, carried over unchanged by the continue since).
"""

from __future__ import annotations

from collections.abc import Sequence

from longtasks.domain.model import CriterionRecord, Effect, PlanVersion
from longtasks.domain.states import CriterionResult, TaskState


def intent_key(effect: Effect) -> str:
    """What makes two tries' effects one intended effect."""
    if effect.idempotency_key:
        return f"key:{effect.idempotency_key}"
    return f"step:{effect.plan_version}:{effect.step_id}"


def duplicate_of(
    effects: Sequence[Effect], effect: Effect, external_id: str | None
) -> Effect | None:
    """The earlier effect with a receipt that ``effect``'s receipt (naming ``external_id``)
    duplicates, or None."""
    key = intent_key(effect)
    for other in effects:
        if other.id == effect.id or other.receipt is None or intent_key(other) != key:
            continue
        same = external_id and other.receipt.external_id == external_id
        if not same:
            return other
    return None


def disputed_completion(
    record: CriterionRecord, result: CriterionResult, plans: Sequence[PlanVersion]
) -> PlanVersion | None:
    """The completed plan version whose completion ``result`` (the verifier's new result
    for ``record``) contradicts, or None."""
    if record.result is not CriterionResult.PASSED or result is CriterionResult.PASSED:
        return None
    passed_at = record.result_at_ms or 0
    for plan in reversed(plans):
        closed = plan.closed_at_ms
        if plan.closed_state is TaskState.COMPLETED and closed is not None and closed >= passed_at:
            return plan
    return None
