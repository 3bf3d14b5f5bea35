"""The activation rules (``longtasks/domain/activation.py``), exhaustively: every sequence of
tool-call tiers a run can make (up to six calls), and the plan a promotion absorbs."""

from __future__ import annotations

import itertools

from longtasks.domain.activation import (
    AbsorbedCall,
    Preflight,
    absorbed_steps,
    absorbed_words,
    preflight,
    with_effect,
)
from longtasks.domain.model import StepDraft
from longtasks.domain.states import Basis, SideEffect, StepState

T = SideEffect


def _run(calls: tuple[SideEffect, ...]) -> list[SideEffect]:
    """The tiers that needed a preflight, in order, as the door records them."""
    evaluated: list[SideEffect] = []
    for tier in calls:
        if preflight(evaluated, tier).answer is Preflight.PREFLIGHT_NEEDED:
            evaluated.append(tier)
    return evaluated


def test_every_sequence_of_calls_keeps_the_per_tier_cap() -> None:
    for length in range(7):
        for calls in itertools.product(tuple(SideEffect), repeat=length):
            asked = _run(calls)
            assert T.PURE not in asked, calls  # pure never
            assert len(asked) == len(set(asked)) <= 3, calls  # no tier twice, at most 3
            # each ask is the first call of a tier higher than every earlier ask
            assert [t.tier for t in asked] == sorted(t.tier for t in asked), calls
            for tier in set(calls) - {T.PURE}:
                seen_higher_or_same = any(t.tier >= tier.tier for t in asked)
                assert seen_higher_or_same, (calls, tier)  # no non-pure tier goes unjudged


def test_the_seed_scenario_an_ordinary_idempotent_verdict_does_not_silence_the_send() -> None:
    calls = (T.PURE, T.IDEMPOTENT, *([T.IDEMPOTENT] * 10), T.NON_IDEMPOTENT, T.NON_IDEMPOTENT)
    assert _run(calls) == [T.IDEMPOTENT, T.NON_IDEMPOTENT]
    assert preflight([], T.PURE).answer is Preflight.ALLOWED
    assert "pure" in preflight([], T.PURE).why
    assert preflight([T.NON_IDEMPOTENT], T.QUERYABLE).answer is Preflight.ALLOWED
    assert "higher" in preflight([T.NON_IDEMPOTENT], T.QUERYABLE).why


def test_absorbed_steps_keep_the_order_receipts_complete_and_the_rest_is_uncertain() -> None:
    calls = [
        AbsorbedCall("read", "Read", T.PURE, "file:a", "read a", has_receipt=True),
        AbsorbedCall("post", "Post", T.NON_IDEMPOTENT, "https://x", "post it"),
        AbsorbedCall("put", "Put", T.IDEMPOTENT, "s3://b", "put b", "k1", has_receipt=True),
    ]
    rest = [StepDraft("mail", "Mail", T.NON_IDEMPOTENT)]
    steps = absorbed_steps("lt", calls, rest, 5)
    assert [s.step_id for s in steps] == ["read", "post", "put", "mail"]
    assert [s.position for s in steps] == [1, 2, 3, 4]
    assert [s.state for s in steps] == [
        StepState.COMPLETED,
        StepState.UNCERTAIN,
        StepState.COMPLETED,
        StepState.PENDING,
    ]
    assert [s.basis for s in steps] == [Basis.RECEIPT, None, Basis.RECEIPT, None]
    assert [s.attempt_count for s in steps] == [1, 1, 1, 0]
    assert steps[2].idempotency_key == "k1"
    tied = with_effect(steps[1], "e2", has_receipt=False)
    assert (tied.intent_id, tied.receipt_id) == ("e2", None)  # an intent: never "no_intent"
    assert with_effect(steps[0], "e1", has_receipt=True).receipt_id == "e1"
    assert absorbed_words(calls).startswith("absorbed 3 executed calls: 2 completed")
