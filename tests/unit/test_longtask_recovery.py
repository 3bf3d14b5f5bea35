"""Safe recovery (seed C "安全恢复"), exhaustively: every side-effect class x trusted evidence
x intent x receipt x probe result, for a running step whose holder died and for an uncertain
one, against an oracle written here; every answer is a legal move of the step rules; and no
sequence of moves ever runs a non-idempotent effect again that may already have happened."""

from __future__ import annotations

import itertools
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longtasks.domain.model import Step
from longtasks.domain.recovery import (
    RecoveryAction,
    after_verification_interrupted,
    held_by_the_dead,
    recover_step,
    resume_point,
)
from longtasks.domain.rules import Refused, StepMoved, decide_step
from longtasks.domain.rules import StepCommand as SC
from longtasks.domain.rules import TaskCommand as C
from longtasks.domain.states import Basis, ProbeResult
from longtasks.domain.states import SideEffect as E
from longtasks.domain.states import StepState as S
from longtasks.domain.states import TaskState as T

A = RecoveryAction
B = Basis
P = ProbeResult
INTENT: Final = "intent-7"  # what a person is asked about


def _step(
    state: S,
    effect: E,
    evidence: bool,
    intent: bool,
    receipt: bool,
    probe: P,
    index: int = 3,
) -> Step:
    return Step(
        index=index,
        state=state,
        side_effect=effect,
        intent_id=INTENT if intent else None,
        receipt_id="receipt-7" if receipt else None,
        evidence=("ev-7",) if evidence else (),
        probe=probe,
        holder="att-dead",
    )


def _oracle(effect: E, evidence: bool, intent: bool, receipt: bool, probe: P) -> tuple[A, B | None]:
    """The seed's flow, spelled out independently of the rule table."""
    if evidence:
        return A.SKIP, B.EVIDENCE  # skip what has trusted completion evidence
    if receipt:
        return A.SKIP, B.RECEIPT  # the machine receipt says the effect happened
    if effect in (E.PURE, E.IDEMPOTENT):
        return A.RETRY, B.CLASS_SAFE  # only pure or idempotent steps retry as such
    if effect is E.QUERYABLE:
        # query the outside world first, then record it done or retry
        answers = {
            P.NOT_PROBED: (A.PROBE_FIRST, None),
            P.DONE: (A.SKIP, B.PROBE_DONE),
            P.NOT_DONE: (A.RETRY, B.PROBE_NOT_DONE),
        }
        if probe in answers:
            return answers[probe]
    if not intent:
        return A.RETRY, B.NO_INTENT  # the intent comes before any effect: none was started
    return A.ASK_USER, None  # cannot tell, cannot repeat: a person decides


FACTS: Final = ("evidence", "intent", "receipt")
COMBINATIONS: Final = list(
    itertools.product((S.RUNNING, S.UNCERTAIN), E, (False, True), (False, True), (False, True), P)
)


@pytest.mark.parametrize(
    ("state", "effect", "evidence", "intent", "receipt", "probe"),
    COMBINATIONS,
    ids=[
        "-".join([s, e, *(n if f else f"no_{n}" for n, f in zip(FACTS, facts, strict=True)), p])
        for s, e, *facts, p in COMBINATIONS
    ],
)
def test_every_combination(
    state: S, effect: E, evidence: bool, intent: bool, receipt: bool, probe: P
) -> None:
    step = _step(state, effect, evidence, intent, receipt, probe)
    recovery = recover_step(step)
    assert (recovery.action, recovery.basis) == _oracle(effect, evidence, intent, receipt, probe)
    assert recovery.step_index == step.index
    assert recovery.material == (INTENT if recovery.action is A.ASK_USER else None)
    _assert_legal(step, recovery.command, recovery.basis)


def _assert_legal(step: Step, command: SC | None, basis: B | None) -> None:
    """The recovery's answer is a move the step rules accept: a dead holder's step becomes
    uncertain first, then the skip (complete) or the retry (begin) on the recovery's basis."""
    if step.state is S.RUNNING:
        first = decide_step(T.RECOVERY_REQUIRED, step, SC.MARK_UNCERTAIN, basis=B.HOLDER_GONE)
        assert isinstance(first, StepMoved) and first.after is S.UNCERTAIN
    if command is None:
        return
    uncertain = Step(
        step.index,
        S.UNCERTAIN,
        step.side_effect,
        step.intent_id,
        step.receipt_id,
        step.evidence,
        step.probe,
    )
    outcome = decide_step(T.RUNNING, uncertain, command, basis=basis)
    assert isinstance(outcome, StepMoved), outcome


@pytest.mark.parametrize("effect", [E.PURE, E.IDEMPOTENT, E.NON_IDEMPOTENT])
def test_a_probe_result_counts_only_for_a_queryable_step(effect: E) -> None:
    for evidence, intent, receipt in itertools.product((False, True), repeat=3):
        answers = {
            recover_step(_step(S.UNCERTAIN, effect, evidence, intent, receipt, p)) for p in P
        }
        assert len(answers) == 1


@pytest.mark.parametrize("state", [S.PENDING, S.COMPLETED, S.SKIPPED, S.FAILED, S.BLOCKED])
def test_only_open_steps_are_recovered(state: S) -> None:
    with pytest.raises(ValueError, match="only a running or uncertain step"):
        recover_step(Step(0, state, E.PURE))


steps = st.builds(
    _step,
    state=st.sampled_from([S.RUNNING, S.UNCERTAIN]),
    effect=st.sampled_from(list(E)),
    evidence=st.booleans(),
    intent=st.booleans(),
    receipt=st.booleans(),
    probe=st.sampled_from(list(P)),
)


@settings(max_examples=300, deadline=None, database=None)
@given(steps)
def test_never_replays_a_non_idempotent_effect_that_may_have_happened(step: Step) -> None:
    recovery = recover_step(step)
    if step.side_effect is E.NON_IDEMPOTENT and step.intent:
        assert recovery.action is not A.RETRY
        if not (step.evidence or step.receipt):
            assert recovery.action is A.ASK_USER and recovery.material == step.intent_id
    if recovery.action is A.RETRY and step.side_effect is E.NON_IDEMPOTENT:
        assert not step.intent and recovery.basis is B.NO_INTENT


#: Every move that may be tried on a step: the attempt's own acts (no basis), and the
#: recovery's or a person's moves on each basis.
MOVES: Final = [(c, b) for c in SC for b in (None, *Basis)]
#: The bases on which a step whose effect may have happened may begin again, by class.
SAFE_AGAIN: Final[dict[E, set[B | None]]] = {
    E.PURE: {None, *Basis},  # running it again is harmless
    E.IDEMPOTENT: {None, *Basis},
    E.QUERYABLE: {B.USER, B.PROBE_NOT_DONE},
    E.NON_IDEMPOTENT: {B.USER},
}
Node = tuple[Step, bool]  # the step's record, and whether its effect may have happened


def _next(node: Node, command: SC, basis: B | None) -> Node | None:
    step, may_have_happened = node
    outcome = decide_step(T.RUNNING, step, command, basis=basis, evidence=("ev",))
    if isinstance(outcome, Refused):
        return None
    if outcome.fresh_try:  # begin, or reopen (a failed step back to pending on a person's word)
        assert not may_have_happened or basis in SAFE_AGAIN[step.side_effect], (step, basis)
        return Step(0, outcome.after, step.side_effect), False
    intent = "i" if command is SC.RECORD_INTENT else step.intent_id
    receipt = "r" if command is SC.RECORD_RECEIPT else step.receipt_id
    after = Step(0, outcome.after, step.side_effect, intent, receipt, probe=step.probe)
    return after, may_have_happened or command is SC.RECORD_INTENT


def _probed(node: Node) -> list[Node]:
    """The outside world answers a queryable step's probe (truthfully: not "not done" once
    its receipt says done)."""
    step, may_have_happened = node
    if step.side_effect is not E.QUERYABLE or step.state is not S.UNCERTAIN:
        return []
    answers = [P.DONE, P.UNKNOWN] + ([] if step.receipt else [P.NOT_DONE])
    return [
        (
            Step(0, step.state, step.side_effect, step.intent_id, step.receipt_id, probe=p),
            may_have_happened,
        )
        for p in answers
    ]


@pytest.mark.parametrize("effect", list(E))
def test_no_sequence_of_moves_repeats_an_effect_that_may_have_happened(effect: E) -> None:
    """Every record a step can reach by any sequence of moves, explored exhaustively: once
    its intent is recorded its effect may have happened, and from then on a new try starts
    only on a basis that makes it safe for its class (for non_idempotent: a person's word);
    and recovery never answers retry for it on any other basis."""
    start: Node = (Step(0, S.PENDING, effect), False)
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node[0].state is S.UNCERTAIN and node[1]:
            recovery = recover_step(node[0])
            assert recovery.action is not A.RETRY or recovery.basis in SAFE_AGAIN[effect]
        successors = [_next(node, c, b) for c, b in MOVES] + _probed(node)
        for after in successors:
            if after is not None and after not in seen:
                seen.add(after)
                todo.append(after)
    assert any(step.state is S.UNCERTAIN and may for step, may in seen)  # it was reached


def test_a_step_that_attempted_an_effect_cannot_be_blocked_and_begun_again() -> None:
    received = Step(0, S.RUNNING, E.NON_IDEMPOTENT, intent_id="i", receipt_id="r")
    blocked = decide_step(T.RUNNING, received, SC.BLOCK)
    assert isinstance(blocked, Refused) and blocked.reason.value == "EFFECT_ATTEMPTED"


def _done(index: int) -> Step:
    return Step(index, S.COMPLETED, E.PURE, evidence=("ev",))


def test_resume_goes_on_from_the_first_safe_unfinished_step() -> None:
    plan = [_done(0), Step(1, S.SKIPPED, E.PURE), Step(2, S.PENDING, E.IDEMPOTENT)]
    resume = resume_point(plan)
    assert (resume.command, resume.step_index, resume.recoveries) == (
        C.ATTEMPT_ENDED_RESUMABLE,
        2,
        (),
    )
    blocked = resume_point([_done(0), Step(1, S.BLOCKED, E.QUERYABLE)])
    assert (blocked.command, blocked.step_index) == (C.ATTEMPT_ENDED_RESUMABLE, 1)
    finished = resume_point([_done(0), _done(1)])
    assert (finished.command, finished.step_index) == (C.ATTEMPT_ENDED_RESUMABLE, None)
    assert "acceptance criteria" in finished.why


def test_resume_skips_proven_steps_then_stops_at_the_first_that_is_not() -> None:
    # a promoted run absorbed two receipt-less calls and one with a receipt (seed: "惰性升级")
    plan = [
        _done(0),
        Step(1, S.UNCERTAIN, E.NON_IDEMPOTENT, intent_id="i1", receipt_id="r1"),
        Step(2, S.RUNNING, E.QUERYABLE, intent_id="i2", probe=P.DONE, holder="att-dead"),
        Step(3, S.UNCERTAIN, E.NON_IDEMPOTENT, intent_id="i3"),
        Step(4, S.PENDING, E.PURE),
    ]
    resume = resume_point(plan)
    assert resume.command is C.ATTEMPT_ENDED_ASK_USER
    assert resume.step_index == 3
    assert [(r.step_index, r.action) for r in resume.recoveries] == [
        (1, A.SKIP),
        (2, A.SKIP),
        (3, A.ASK_USER),
    ]
    assert resume.recoveries[-1].material == "i3"


@pytest.mark.parametrize(
    ("step", "command"),
    [
        (Step(1, S.UNCERTAIN, E.IDEMPOTENT, intent_id="i"), C.ATTEMPT_ENDED_RESUMABLE),
        (Step(1, S.UNCERTAIN, E.QUERYABLE, intent_id="i"), C.ATTEMPT_ENDED_RESUMABLE),
        (Step(1, S.RUNNING, E.NON_IDEMPOTENT), C.ATTEMPT_ENDED_RESUMABLE),
        (Step(1, S.FAILED, E.PURE), C.ATTEMPT_ENDED_NEEDS_REVIEW),
    ],
)
def test_resume_stops_at_a_retry_a_probe_or_a_failed_step(step: Step, command: C) -> None:
    resume = resume_point([_done(0), step, Step(2, S.PENDING, E.PURE)])
    assert (resume.command, resume.step_index) == (command, 1)


def test_an_interrupted_verification_runs_again_until_the_limit() -> None:
    assert after_verification_interrupted(0, 3) is C.ATTEMPT_ENDED_RESUMABLE
    assert after_verification_interrupted(2, 3) is C.ATTEMPT_ENDED_RESUMABLE
    assert after_verification_interrupted(3, 3) is C.ATTEMPT_ENDED_NEEDS_REVIEW


@pytest.mark.parametrize("task", list(T))
def test_on_start_steps_held_by_a_dead_process_become_uncertain_never_pending(task: T) -> None:
    plan = [
        _done(0),
        Step(1, S.RUNNING, E.NON_IDEMPOTENT, intent_id="i", holder="att-dead"),
        Step(2, S.RUNNING, E.PURE, holder="att-live"),
        Step(3, S.PENDING, E.PURE),
    ]
    moves = held_by_the_dead(task, plan, frozenset({"att-live"}))
    assert [(i, m.before, m.after, m.basis) for i, m in moves] == [
        (1, S.RUNNING, S.UNCERTAIN, B.HOLDER_GONE)
    ]
    everyone_dead = held_by_the_dead(task, plan, frozenset())
    assert {m.after for _, m in everyone_dead} == {S.UNCERTAIN}
    assert [i for i, _ in everyone_dead] == [1, 2]
