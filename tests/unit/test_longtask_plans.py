"""A new plan version's steps (longtasks/domain/plans.py): every step state meets a revision
that keeps it with the same terms, keeps it with new terms, or drops it."""

from __future__ import annotations

import pytest

from longtasks.domain.model import PlanStep, StepDraft
from longtasks.domain.plans import OPEN, UNSTARTED, first_plan, plan_refusal, revise_steps
from longtasks.domain.rules import Refusal, Refused
from longtasks.domain.states import Basis
from longtasks.domain.states import SideEffect as E
from longtasks.domain.states import StepState as S


def _step(state: S) -> PlanStep:
    return PlanStep(
        "t", 1, "a", 1, "send", E.NON_IDEMPOTENT, state, 4, 1,
        attempt_count=1, intent_id="i", basis=Basis.USER,
    )  # fmt: skip


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("terms", ["same", "new", "dropped"])
def test_every_step_state_against_every_revision(state: S, terms: str) -> None:
    old = _step(state)
    drafts = {
        "same": [old.draft(), StepDraft("b", "new step", E.PURE)],
        "new": [StepDraft("a", "send twice", E.NON_IDEMPOTENT), StepDraft("b", "x", E.PURE)],
        "dropped": [StepDraft("b", "new step", E.PURE)],
    }[terms]
    revised = revise_steps("t", [old], drafts, 2, 99)
    if terms == "dropped" and state in OPEN:
        assert isinstance(revised, Refused) and revised.reason is Refusal.OPEN_STEP
        return
    assert not isinstance(revised, Refused)
    added = revised[-1]
    assert (added.step_id, added.state, added.version, added.introduced_in) == (
        "b",
        S.PENDING,
        1,
        2,
    )
    if terms == "dropped":
        assert len(revised) == 1
        return
    kept = revised[0]
    assert (kept.plan_version, kept.position, kept.state) == (2, 1, state)
    assert (kept.intent_id, kept.attempt_count, kept.introduced_in) == ("i", 1, 1)
    if terms == "new" and state in UNSTARTED:
        assert (kept.title, kept.version) == ("send twice", 5)  # new terms: a new version
    else:
        assert (kept.title, kept.version) == ("send", 4)  # a step that ran is history


def test_a_plan_needs_steps_with_their_own_ids() -> None:
    assert plan_refusal([]) is not None
    twice = [StepDraft("a", "x", E.PURE), StepDraft("a", "y", E.PURE)]
    refused = plan_refusal(twice)
    assert refused is not None and refused.reason is Refusal.INVALID_PLAN
    steps = first_plan("t", [StepDraft("a", "x", E.PURE), StepDraft("b", "y", E.QUERYABLE)], 7)
    assert [(s.position, s.state, s.version, s.introduced_in) for s in steps] == [
        (1, S.PENDING, 1, 1),
        (2, S.PENDING, 1, 1),
    ]
