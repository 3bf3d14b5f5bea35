"""The words beside a long task's display label (longtasks/domain/progress.py): where it is
in its plan, the repeat of an approval, a partial task's proven share, and the recovery
prompt a person answers, for each state that has them and none for the others."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from longtasks.domain.completion import Criterion
from longtasks.domain.model import CriterionRecord, Decision, Effect, PlanStep
from longtasks.domain.progress import ordinal, progress, recovery_prompt
from longtasks.domain.states import (
    CriterionResult,
    DecisionKind,
    DecisionState,
    SideEffect,
    StepState,
    TaskState,
)

T = TaskState


def _step(position: int, state: StepState) -> PlanStep:
    return PlanStep(
        "t", 1, f"s{position}", position, f"part {position}", SideEffect.PURE, state, 1, 1
    )


STEPS = (_step(1, StepState.COMPLETED), _step(2, StepState.RUNNING), _step(3, StepState.PENDING))


def _criterion(cid: str, required: bool, result: CriterionResult) -> CriterionRecord:
    return CriterionRecord(Criterion(cid, cid, "file_exists", required), 0, result=result)


def _decision(kind: DecisionKind, repeat: int = 1, material: str = "{}") -> Decision:
    return Decision(
        "d", "t", kind, DecisionState.OPEN, "?", 1, 1, 0, material=material, repeat_count=repeat
    )


@pytest.mark.parametrize(
    ("n", "words"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (22, "22nd")]
)
def test_ordinals(n: int, words: str) -> None:
    assert ordinal(n) == words


def test_progress_per_state() -> None:
    assert progress(T.RUNNING, STEPS, (), ()) == "step 2/3 · part 2"
    assert progress(T.VERIFYING, STEPS, (), ()) == (
        "all 3 steps done · checking the acceptance criteria"
    )
    approval = _decision(DecisionKind.APPROVAL, repeat=3)
    assert progress(T.WAITING_FOR_APPROVAL, STEPS, (), (approval,)) == (
        "3rd request for the same permission · step 2/3 · part 2"
    )
    first = _decision(DecisionKind.APPROVAL)
    assert progress(T.WAITING_FOR_APPROVAL, STEPS, (), (first,)) == "step 2/3 · part 2"
    question = _decision(DecisionKind.QUESTION)
    assert progress(T.WAITING_FOR_USER, STEPS, (), (question, question)) == "2 questions open"
    criteria = (
        _criterion("a", True, CriterionResult.PASSED),
        _criterion("b", True, CriterionResult.FAILED),
        _criterion("c", False, CriterionResult.FAILED),
    )
    assert progress(T.PARTIAL, STEPS, criteria, ()) == "partial 1/2: required criteria proven"
    for quiet in (T.PLANNED, T.QUEUED, T.COMPLETED, T.FAILED, T.CANCELLED):
        assert progress(quiet, STEPS, criteria, ()) == ""


def test_the_recovery_prompt_is_written_for_a_person() -> None:
    material = json.dumps(
        {
            "title": "send the email",
            "target": "mailto:team",
            "summary": "the weekly report",
            "intent_recorded_at_ms": 1_700_000_000_000,
        }
    )
    effect = _decision(DecisionKind.EFFECT, material=material)
    assert recovery_prompt(T.WAITING_FOR_USER, "", (effect,)) == (
        "Before the interruption it was working on “send the email”; truerun cannot tell "
        "whether it was done. Intent recorded 2023-11-14 22:13 UTC, target mailto:team, "
        "summary “the weekly report”."
    )
    damaged = _decision(DecisionKind.EFFECT, material="not json")
    assert "working on “its current step”" in recovery_prompt(T.WAITING_FOR_USER, "", (damaged,))
    assert "at an unknown time" in recovery_prompt(T.WAITING_FOR_USER, "", (damaged,))
    stopped = recovery_prompt(T.RECOVERY_REQUIRED, "step 1 failed", ())
    assert stopped.startswith("It stopped and needs a person before it goes on: step 1 failed.")
    assert recovery_prompt(T.WAITING_FOR_USER, "", (_decision(DecisionKind.QUESTION),)) == ""
    assert recovery_prompt(T.RUNNING, "", ()) == ""


def test_the_recovery_prompt_names_the_failed_step_and_its_intent() -> None:
    failed = replace(_step(2, StepState.FAILED), intent_id="e-2")
    plan = (_step(1, StepState.COMPLETED), failed, _step(3, StepState.PENDING))
    effect = Effect("e-2", "t", "s2", 1, "a", 1, "mailto:team", "the weekly report", None, 0)
    other = replace(effect, id="e-1", step_id="s1", target="elsewhere")
    words = recovery_prompt(T.RECOVERY_REQUIRED, "step 2 failed", (), plan, (other, effect))
    assert words == (
        "Before it stopped it was working on “part 2”: step 2 failed. truerun cannot tell "
        "whether its work was done: if it was, skip the step; if not, it runs again. Intent "
        "recorded 1970-01-01 00:00 UTC, target mailto:team, summary “the weekly report”."
    )
    no_intent = recovery_prompt(T.RECOVERY_REQUIRED, "step 2 failed", (), plan, ())
    assert no_intent.endswith("if not, it runs again.")
    verifying = recovery_prompt(T.RECOVERY_REQUIRED, "verification interrupted", (), STEPS[:1])
    assert verifying.startswith("It stopped and needs a person before it goes on")
