"""Activation and lazy promotion (seed C "自动启用"; docs/long-tasks.md "Activation and
promotion"), as pure rules over plain data.

- ``preflight``: an ordinary run's runtime asks before a tool call of a side-effect tier.
  A pure tool never needs one; each tier is evaluated at most once per run; a higher tier
  than any evaluated so far is always evaluated again, whatever the lower one's verdict
  (an ordinary verdict at ``idempotent`` never silences the first ``non_idempotent`` send).
  So a run pays at most three preflights.
- ``absorbed_steps``: the plan a promotion writes. The calls the run already executed come
  first, in the order they happened: a call with a receipt is a completed step citing that
  receipt; a call without one is ``uncertain`` (its intent recorded, so recovery treats it
  by its class and never replays a non-idempotent one by itself). The declared remaining
  steps follow, pending. Nothing is dropped, nothing is marked to run again.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from longtasks.domain.model import PlanStep, StepDraft
from longtasks.domain.plans import first_plan
from longtasks.domain.states import Basis, SideEffect, StepState


class Preflight(StrEnum):
    """The answer to "may this tool call go ahead?"."""

    ALLOWED = "allowed"  # no preflight: go ahead
    PREFLIGHT_NEEDED = "preflight_needed"  # classify this tier first (once, ever, per run)


class Verdict(StrEnum):
    ORDINARY = "ordinary"  # stays an ordinary run; later calls of this tier go ahead
    PROMOTE = "promote"  # becomes a long task (PromoteRun)


class Path(StrEnum):
    """How the activation decision was reached (a run event names it)."""

    LAZY = "lazy"  # a classifier at the first call of a tier
    DETERMINISTIC = "deterministic"  # the request itself: multi-day intent, a force, a task id
    BUDGET = "budget"  # the run spent past the threshold with unfinished multi-stage work
    PLAN = "plan"  # the model proposed a multi-stage plan, or one with waits or approvals


#: Paths that promote without a classifier call (seed: "直接创建 ..., 不再请求分类").
DETERMINISTIC_PATHS = frozenset({Path.DETERMINISTIC, Path.BUDGET, Path.PLAN})


@dataclass(frozen=True, slots=True)
class PreflightAnswer:
    answer: Preflight
    why: str


def preflight(evaluated: Collection[SideEffect], tier: SideEffect) -> PreflightAnswer:
    """Whether a tool call of ``tier`` needs a preflight, given the tiers this run has
    already evaluated (whatever their verdicts)."""
    if tier is SideEffect.PURE:
        return PreflightAnswer(Preflight.ALLOWED, "a pure tool never needs a preflight")
    if tier in evaluated:
        return PreflightAnswer(
            Preflight.ALLOWED, f"the {tier} tier was evaluated in this run already"
        )
    higher = [t for t in evaluated if t.tier > tier.tier]
    if higher:
        top = max(higher, key=lambda t: t.tier)
        return PreflightAnswer(
            Preflight.ALLOWED, f"the higher {top} tier was evaluated in this run already"
        )
    return PreflightAnswer(Preflight.PREFLIGHT_NEEDED, f"first {tier} tool call of this run")


@dataclass(frozen=True, slots=True)
class AbsorbedCall:
    """A tool call the run executed before it was promoted, as its runtime reports it."""

    step_id: str
    title: str
    side_effect: SideEffect
    target: str
    summary: str
    idempotency_key: str | None = None
    has_receipt: bool = False


def absorbed_steps(
    task_id: str,
    calls: Sequence[AbsorbedCall],
    remaining: Sequence[StepDraft],
    now_ms: int,
) -> tuple[PlanStep, ...]:
    """Plan version 1 of a promoted run: ``calls`` in order (completed on their receipt, or
    uncertain), then ``remaining`` pending. Intent and receipt ids are the caller's to fill
    (``with_effect``); the caller checked ``plans.plan_refusal`` over all of them."""
    drafts = [
        StepDraft(c.step_id, c.title, c.side_effect, c.idempotency_key, input_summary=c.summary)
        for c in calls
    ]
    steps = list(first_plan(task_id, [*drafts, *remaining], now_ms))
    for index, call in enumerate(calls):
        state = StepState.COMPLETED if call.has_receipt else StepState.UNCERTAIN
        basis = Basis.RECEIPT if call.has_receipt else None
        steps[index] = replace(steps[index], state=state, basis=basis, attempt_count=1)
    return tuple(steps)


def with_effect(step: PlanStep, effect_id: str, has_receipt: bool) -> PlanStep:
    """An absorbed step pointing at its effect record: the intent, and the receipt if any."""
    return replace(step, intent_id=effect_id, receipt_id=effect_id if has_receipt else None)


def absorbed_words(calls: Sequence[AbsorbedCall]) -> str:
    """What a promotion absorbed, for its event and the run's event."""
    done = sum(1 for c in calls if c.has_receipt)
    return (
        f"absorbed {len(calls)} executed calls: {done} completed on their receipts, "
        f"{len(calls) - done} uncertain (no receipt); none run again"
    )
