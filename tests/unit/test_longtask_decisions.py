"""Answering a decision (longtasks/domain/decisions.py), every kind against every state and
every answer it could be given: answered once, only while open, only with an answer its kind
takes; and what each answer does to the task and the step."""

from __future__ import annotations

import itertools

import pytest

from longtasks.domain.decisions import (
    ANSWERS,
    EFFECT_MOVES,
    ApprovalAnswer,
    EffectAnswer,
    VerificationAnswer,
    answer_refusal,
    task_command,
)
from longtasks.domain.model import Budget
from longtasks.domain.rules import Refusal, StepCommand, TaskCommand
from longtasks.domain.states import DecisionKind, DecisionState

K = DecisionKind
EVERY_ANSWER = sorted({*EffectAnswer, *VerificationAnswer, *ApprovalAnswer, "in the morning", ""})


@pytest.mark.parametrize(
    ("state", "kind", "answer"), list(itertools.product(DecisionState, K, EVERY_ANSWER))
)
def test_every_answer_to_every_decision(state: DecisionState, kind: K, answer: str) -> None:
    refused = answer_refusal(state, kind, answer)
    offered = ANSWERS[kind]
    if state is not DecisionState.OPEN:
        assert refused is not None and refused.reason is Refusal.DECISION_CLOSED
    elif not answer or (offered is not None and answer not in offered):
        assert refused is not None and refused.reason is Refusal.ANSWER_NOT_OFFERED
    else:
        assert refused is None


def test_an_approval_answer_lets_its_attempt_go_on_and_every_other_queues_a_new_one() -> None:
    assert task_command(K.APPROVAL, ApprovalAnswer.GRANT) is TaskCommand.APPROVAL_GRANTED
    assert task_command(K.APPROVAL, ApprovalAnswer.DENY) is TaskCommand.APPROVAL_DENIED
    for kind in (K.QUESTION, K.EFFECT, K.VERIFICATION):
        assert task_command(kind, "x") is TaskCommand.DECISION_ANSWERED


def test_an_effect_answer_is_the_step_move_a_person_allows() -> None:
    assert dict(EFFECT_MOVES) == {
        EffectAnswer.DONE: StepCommand.COMPLETE,
        EffectAnswer.RETRY: StepCommand.BEGIN,
        EffectAnswer.SKIP: StepCommand.SKIP,
        EffectAnswer.FAIL: StepCommand.FAIL,
    }


@pytest.mark.parametrize(
    ("budget", "now", "why"),
    [
        (Budget(3, attempts_used=2), 0, None),
        (Budget(3, attempts_used=3), 0, "attempts"),
        (Budget(3, max_tokens=100, tokens_used=100), 0, "tokens"),
        (Budget(3, deadline_ms=10), 9, None),
        (Budget(3, deadline_ms=10), 10, "lifetime"),
    ],
)
def test_a_used_up_budget_says_which(budget: Budget, now: int, why: str | None) -> None:
    found = budget.exhausted(now)
    assert (found is None) if why is None else (found is not None and why in found)
