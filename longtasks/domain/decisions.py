"""Answering a person's decision, pure: which answers each kind of decision takes and what
each answer does (seed C "安全恢复", "执行上下文与 attempt", "任务级完成判定").

- ``question``: the attempt's own question; any non-empty answer, carried to a new attempt.
- ``effect``: did an uncertain step's recorded intent take effect? ``done`` completes the
  step, ``retry`` lets the next attempt run it again, ``skip`` and ``fail`` do what they say;
  each is the step move on the basis ``user``.
- ``verification``: the verifier could not prove every required criterion; ``confirm``
  counts as a person's pass for each subjective one, ``reject`` as a fail.
- ``approval``: ``grant`` or ``deny`` one exact action; the attempt that asked goes on.

A decision is answered once, while it is open; a second answer is refused
(``DECISION_CLOSED``), so two people answering at once cannot both win.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from longtasks.domain.rules import Refusal, Refused, StepCommand, TaskCommand
from longtasks.domain.states import CriterionResult, DecisionKind, DecisionState


class EffectAnswer(StrEnum):
    DONE = "done"  # it took effect: complete the step
    RETRY = "retry"  # it did not: the next attempt runs it again
    SKIP = "skip"
    FAIL = "fail"


class VerificationAnswer(StrEnum):
    CONFIRM = "confirm"
    REJECT = "reject"


class ApprovalAnswer(StrEnum):
    GRANT = "grant"
    DENY = "deny"


#: The answers each kind takes (None: any non-empty text).
ANSWERS: Mapping[DecisionKind, frozenset[str] | None] = {
    DecisionKind.QUESTION: None,
    DecisionKind.EFFECT: frozenset(EffectAnswer),
    DecisionKind.VERIFICATION: frozenset(VerificationAnswer),
    DecisionKind.APPROVAL: frozenset(ApprovalAnswer),
}

#: An effect answer's step move (made on the basis ``user``).
EFFECT_MOVES: Mapping[EffectAnswer, StepCommand] = {
    EffectAnswer.DONE: StepCommand.COMPLETE,
    EffectAnswer.RETRY: StepCommand.BEGIN,
    EffectAnswer.SKIP: StepCommand.SKIP,
    EffectAnswer.FAIL: StepCommand.FAIL,
}

#: A verification answer's result for each unproven subjective criterion.
VERIFICATION_RESULTS: Mapping[VerificationAnswer, CriterionResult] = {
    VerificationAnswer.CONFIRM: CriterionResult.PASSED,
    VerificationAnswer.REJECT: CriterionResult.FAILED,
}


def answer_refusal(state: DecisionState, kind: DecisionKind, answer: str) -> Refused | None:
    """Why ``answer`` may not be given to a decision (None: it may)."""
    if state is not DecisionState.OPEN:
        return Refused(Refusal.DECISION_CLOSED, f"the decision is {state}, not open")
    allowed = ANSWERS[kind]
    if not answer.strip() or (allowed is not None and answer not in allowed):
        offered = "any text" if allowed is None else ", ".join(sorted(allowed))
        return Refused(Refusal.ANSWER_NOT_OFFERED, f"a {kind} decision takes {offered}")
    return None


def task_command(kind: DecisionKind, answer: str) -> TaskCommand:
    """What answering does to the task: an approval lets its attempt go on; every other
    answer is carried out by a new attempt with a fresh briefing."""
    if kind is DecisionKind.APPROVAL:
        if answer == ApprovalAnswer.GRANT:
            return TaskCommand.APPROVAL_GRANTED
        return TaskCommand.APPROVAL_DENIED
    return TaskCommand.DECISION_ANSWERED
