"""A new plan version's steps (longtasks/domain/plans.py): every step state meets a revision
that keeps it with the same terms, keeps it with new terms, or drops it; an idempotent step
without its idempotency key is refused wherever a plan takes it, and its intents carry the
step's key only (docs/long-tasks.md "3. Steps")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from longtasks.domain.model import PlanStep, StepDraft
from longtasks.domain.plans import (
    OPEN,
    UNSTARTED,
    first_plan,
    intent_key_refusal,
    plan_refusal,
    revise_steps,
)
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


@pytest.mark.parametrize("key", [None, "", "  "], ids=["none", "empty", "blank"])
def test_an_idempotent_step_without_a_key_is_refused_naming_it(key: str | None) -> None:
    steps = [StepDraft("a", "x", E.PURE), StepDraft("put", "put it", E.IDEMPOTENT, key)]
    refused = plan_refusal(steps)
    assert refused is not None and refused.reason is Refusal.INVALID_PLAN
    assert refused.message.startswith("step put is idempotent but has no idempotency_key")
    # the other classes need none: nothing retries them by their class with a key
    for side in (E.PURE, E.QUERYABLE, E.NON_IDEMPOTENT):
        assert plan_refusal([StepDraft("put", "put it", side, key)]) is None
    assert plan_refusal([StepDraft("put", "put it", E.IDEMPOTENT, "put-1")]) is None


@pytest.mark.parametrize("state", list(S))
def test_a_revision_needs_a_key_for_the_idempotent_steps_it_takes(state: S) -> None:
    """A new step and a step that has not run take the revision's terms: they need a key; a
    step that ran is kept as it is whatever the revision lists (its key is history)."""
    keyed = PlanStep("t", 1, "a", 1, "put", E.IDEMPOTENT, state, 4, 1, idempotency_key="a-1")
    new = revise_steps("t", [keyed], [keyed.draft(), StepDraft("b", "y", E.IDEMPOTENT)], 2, 9)
    assert isinstance(new, Refused) and "step b is idempotent" in new.message
    old = replace(keyed, idempotency_key=None)  # stored before plans were checked for keys
    kept = revise_steps("t", [old], [old.draft()], 2, 9)
    if state in UNSTARTED:  # it would run with no key
        assert isinstance(kept, Refused) and "step a is idempotent" in kept.message
        given = revise_steps("t", [old], [StepDraft("a", "put", E.IDEMPOTENT, "put-1")], 2, 9)
        assert not isinstance(given, Refused) and given[0].idempotency_key == "put-1"
    else:
        assert not isinstance(kept, Refused) and kept[0].idempotency_key is None


def test_an_idempotent_steps_intent_carries_its_key_and_no_other() -> None:
    keyed = PlanStep("t", 1, "put", 1, "put", E.IDEMPOTENT, S.RUNNING, 2, 1, idempotency_key="k")
    assert intent_key_refusal(keyed, None) is None  # none given: the step's own
    assert intent_key_refusal(keyed, "k") is None
    other = intent_key_refusal(keyed, "k-attempt-2")
    assert other is not None and "'k-attempt-2'" in other
    stored_without = PlanStep("t", 1, "put", 1, "put", E.IDEMPOTENT, S.RUNNING, 2, 1)
    for given in (None, "", "made-up"):
        refused = intent_key_refusal(stored_without, given)
        assert refused is not None and "step put is idempotent" in refused
    sent = PlanStep("t", 1, "send", 1, "send", E.NON_IDEMPOTENT, S.RUNNING, 2, 1)
    assert intent_key_refusal(sent, None) is None and intent_key_refusal(sent, "any") is None
