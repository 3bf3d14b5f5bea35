"""A new plan version's steps, pure (seed C "Implementation Decisions": linear plans whose
steps may be inserted, skipped or replaced through a new plan version).

A step keeps its id across versions. The revision lists the new version's steps in order:
- a step that ran (running, uncertain, completed, skipped, failed) is kept exactly as it is,
  its state, current try and evidence included: what happened is history, and a completed
  step keeps its evidence; a step left out is still in the old version's record;
- a step that is running or uncertain must be kept (``OPEN_STEP``): its effect may have
  happened, and dropping it would forget that;
- a pending or blocked step takes the new terms; if they changed, its version moves, so an
  attempt holding the old terms is refused;
- a new id is a new pending step.

An ``idempotent`` step declares its idempotency key (``key_refusal``): that class is
retried by itself after a crash (``recovery``), which is harmless only if every try makes
its effect with the same key. A step with no key is refused where a plan is written (and
an intent with no key, or another key, where an intent is recorded): never an empty key
(docs/long-tasks.md "3. Steps").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from longtasks.domain.model import PlanStep, StepDraft
from longtasks.domain.rules import Refusal, Refused
from longtasks.domain.states import SideEffect, StepState

#: Steps whose terms a revision may change: nothing of theirs has run.
UNSTARTED = frozenset({StepState.PENDING, StepState.BLOCKED})
#: Steps a revision must keep: their effect may have happened.
OPEN = frozenset({StepState.RUNNING, StepState.UNCERTAIN})


def first_plan(task_id: str, drafts: Sequence[StepDraft], now_ms: int) -> tuple[PlanStep, ...]:
    """The steps of plan version 1 (the caller checked ``plan_refusal`` first)."""
    return tuple(_new(task_id, 1, i, d, now_ms) for i, d in enumerate(drafts, 1))


def plan_refusal(drafts: Sequence[StepDraft]) -> Refused | None:
    """A new plan's steps (creation, promotion): ids, then every step's key."""
    return _id_refusal(drafts) or key_refusal(drafts)


def _id_refusal(drafts: Sequence[StepDraft]) -> Refused | None:
    ids = [d.step_id for d in drafts]
    if not ids:
        return Refused(Refusal.INVALID_PLAN, "a plan needs at least one step")
    if len(set(ids)) != len(ids) or not all(i.strip() for i in ids):
        return Refused(Refusal.INVALID_PLAN, "every step needs its own non-empty id")
    return None


def keyless(side_effect: SideEffect, key: str | None) -> bool:
    """An idempotent step (or its intent) without a usable key: none, or only blanks."""
    return side_effect is SideEffect.IDEMPOTENT and not (key or "").strip()


def key_required(step_id: str) -> str:
    """The words of the refusal, the same at every door (API, CLI file, domain)."""
    return (
        f"step {step_id} is idempotent but has no idempotency_key: give it a key that stays"
        " the same on every attempt (a repeat with it must be harmless), or declare the step"
        " queryable or non_idempotent"
    )


def key_refusal(drafts: Sequence[StepDraft]) -> Refused | None:
    """The first idempotent step without a key. Recovery retries an idempotent step by its
    class alone (``recovery.RECOVERY_RULES``); with no key the retry repeats the effect."""
    for draft in drafts:
        if keyless(draft.side_effect, draft.idempotency_key):
            return Refused(Refusal.INVALID_PLAN, key_required(draft.step_id))
    return None


def intent_key_refusal(step: PlanStep, given: str | None) -> str | None:
    """Why an intent of ``step`` with key ``given`` (None: the step's own) is refused, if it
    is. An idempotent step's intents all carry its declared key: a key the attempt makes up
    could differ on the next attempt, and the retry would not be the same request. A step
    stored without a key (written before plans were checked for one) records no intent: a
    revised plan gives it a key while it has not run, otherwise a person decides."""
    if step.side_effect is not SideEffect.IDEMPOTENT:
        return None
    if keyless(step.side_effect, step.idempotency_key):
        return key_required(step.step_id) + " (it was stored before plans were checked for one)"
    if given and given != step.idempotency_key:
        return (
            f"step {step.step_id} is idempotent with idempotency_key {step.idempotency_key!r}:"
            f" its intent is made with that key (or none, which means it), not {given!r}"
        )
    return None


def revise_steps(
    task_id: str,
    current: Sequence[PlanStep],
    drafts: Sequence[StepDraft],
    version: int,
    now_ms: int,
) -> tuple[PlanStep, ...] | Refused:
    """The steps of plan version ``version`` replacing ``current``."""
    before = {s.step_id: s for s in current}
    # only the drafts whose terms are taken need a key: a step that ran is kept as it is
    ran = {s.step_id for s in current if s.state not in UNSTARTED}
    refused = _id_refusal(drafts) or key_refusal([d for d in drafts if d.step_id not in ran])
    if refused is not None:
        return refused
    listed = {d.step_id for d in drafts}
    dropped = [s.step_id for s in current if s.state in OPEN and s.step_id not in listed]
    if dropped:
        why = f"steps {dropped} may have had their effect: a revision keeps them"
        return Refused(Refusal.OPEN_STEP, why)
    steps = []
    for position, draft in enumerate(drafts, 1):
        old = before.get(draft.step_id)
        if old is None:
            steps.append(_new(task_id, version, position, draft, now_ms))
        elif old.state not in UNSTARTED or old.draft() == draft:
            steps.append(replace(old, plan_version=version, position=position))
        else:
            steps.append(_retermed(old, draft, version, position, now_ms))
    return tuple(steps)


def _new(task_id: str, version: int, position: int, draft: StepDraft, now_ms: int) -> PlanStep:
    return PlanStep(
        task_id=task_id,
        plan_version=version,
        step_id=draft.step_id,
        position=position,
        title=draft.title,
        side_effect=draft.side_effect,
        state=StepState.PENDING,
        version=1,
        introduced_in=version,
        idempotency_key=draft.idempotency_key,
        probe_spec=draft.probe_spec,
        input_summary=draft.input_summary,
        action_spec=draft.action_spec,
        updated_at_ms=now_ms,
    )


def _retermed(
    old: PlanStep, draft: StepDraft, version: int, position: int, now_ms: int
) -> PlanStep:
    return replace(
        old,
        plan_version=version,
        position=position,
        title=draft.title,
        side_effect=draft.side_effect,
        idempotency_key=draft.idempotency_key,
        probe_spec=draft.probe_spec,
        input_summary=draft.input_summary,
        action_spec=draft.action_spec,
        version=old.version + 1,
        updated_at_ms=now_ms,
    )
