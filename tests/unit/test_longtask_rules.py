"""The long-task transition tables, exhaustively (docs/long-tasks.md is the contract).

Every task command meets every task state (and no task at all): each pair must give the
answer written out in ``EXPECTED`` below, or be refused with the stable reason the refusal
rules name. Every step command meets every step state, side-effect class and basis.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Final

import pytest

from longtasks.domain.model import Step
from longtasks.domain.rules import (
    CONTINUATIONS,
    TASK_TRANSITIONS,
    Continued,
    Moved,
    Refusal,
    Refused,
    StepMoved,
    decide_step,
    decide_task,
    verification_refusal,
)
from longtasks.domain.rules import StepCommand as SC
from longtasks.domain.rules import TaskCommand as C
from longtasks.domain.states import TASK_NOT_TERMINAL, Basis, ProbeResult
from longtasks.domain.states import SideEffect as E
from longtasks.domain.states import StepState as S
from longtasks.domain.states import TaskState as T

ALL: Final = frozenset(T)
OPEN: Final = frozenset(T) - {T.PARTIAL, T.COMPLETED, T.FAILED, T.CANCELLED}

#: command -> (the states it is legal in, where it goes; None: the state stays).
EXPECTED: Final[dict[C, tuple[frozenset[T], T | None]]] = {
    C.REVISE_PLAN: (OPEN - {T.VERIFYING}, None),
    C.ENQUEUE: (frozenset({T.PLANNED}), T.QUEUED),
    C.ATTEMPT_STARTED: (frozenset({T.QUEUED}), T.RUNNING),
    C.STEP_BEGAN: (frozenset({T.RUNNING}), None),
    C.REQUEST_DECISION: (
        frozenset({T.RUNNING, T.VERIFYING, T.RECOVERY_REQUIRED}),
        T.WAITING_FOR_USER,
    ),
    C.DECISION_ANSWERED: (frozenset({T.WAITING_FOR_USER}), T.QUEUED),
    C.REQUEST_APPROVAL: (frozenset({T.RUNNING}), T.WAITING_FOR_APPROVAL),
    C.APPROVAL_GRANTED: (frozenset({T.WAITING_FOR_APPROVAL}), T.RUNNING),
    C.APPROVAL_DENIED: (frozenset({T.WAITING_FOR_APPROVAL}), T.RUNNING),
    C.PAUSE: (frozenset({T.PLANNED, T.QUEUED, T.RUNNING, T.VERIFYING}), T.PAUSED),
    C.RESUME: (frozenset({T.PAUSED}), T.QUEUED),
    C.CANCEL: (OPEN, T.CANCELLED),
    C.READY_FOR_VERIFICATION: (frozenset({T.RUNNING}), T.VERIFYING),
    C.VERIFICATION_PASSED: (frozenset({T.VERIFYING}), T.COMPLETED),
    C.VERIFICATION_INCOMPLETE: (frozenset({T.VERIFYING}), T.PARTIAL),
    C.START_CORRECTION: (frozenset({T.VERIFYING}), T.RUNNING),
    C.ATTEMPT_ENDED_RESUMABLE: (
        frozenset({T.RUNNING, T.VERIFYING, T.WAITING_FOR_APPROVAL}),
        T.QUEUED,
    ),
    C.ATTEMPT_ENDED_ASK_USER: (
        frozenset({T.RUNNING, T.WAITING_FOR_APPROVAL}),
        T.WAITING_FOR_USER,
    ),
    C.ATTEMPT_ENDED_NEEDS_REVIEW: (
        frozenset({T.RUNNING, T.VERIFYING, T.WAITING_FOR_APPROVAL}),
        T.RECOVERY_REQUIRED,
    ),
    C.RECOVERY_CLEARED: (frozenset({T.RECOVERY_REQUIRED}), T.QUEUED),
    C.BUDGET_EXHAUSTED: (OPEN, T.PARTIAL),
    C.FAIL: (OPEN, T.FAILED),
    C.CREATE: (frozenset(), None),  # only without a task: see test_create
    C.CONTINUE: (frozenset(), None),  # a continuation, not a move: see below
}
#: Refusals that say more than INVALID_TASK_TRANSITION / TASK_TERMINAL.
SPECIFIC: Final[dict[tuple[T, C], Refusal]] = {
    (T.VERIFYING, C.STEP_BEGAN): Refusal.TASK_VERIFYING,
    (T.VERIFYING, C.REVISE_PLAN): Refusal.TASK_VERIFYING,
    (T.WAITING_FOR_USER, C.PAUSE): Refusal.OPEN_QUESTION,
    (T.WAITING_FOR_APPROVAL, C.PAUSE): Refusal.OPEN_QUESTION,
    (T.RECOVERY_REQUIRED, C.PAUSE): Refusal.OPEN_QUESTION,
    (T.CANCELLED, C.CONTINUE): Refusal.TASK_CANCELLED,
}


def _expected_refusal(state: T, command: C) -> Refusal:
    if (state, command) in SPECIFIC:
        return SPECIFIC[(state, command)]
    if command is C.CREATE:
        return Refusal.TASK_EXISTS
    if command is C.CONTINUE:
        return Refusal.TASK_NOT_FINISHED
    return Refusal.TASK_TERMINAL if state.terminal else Refusal.INVALID_TASK_TRANSITION


def test_expected_names_every_command() -> None:
    assert set(EXPECTED) == set(C)


@pytest.mark.parametrize(
    ("state", "command"),
    list(itertools.product(T, C)),
    ids=[f"{s}-{c}" for s, c in itertools.product(T, C)],
)
def test_every_command_in_every_state(state: T, command: C) -> None:
    legal, target = EXPECTED[command]
    outcome = decide_task(state, command)
    if state in legal:
        assert outcome == Moved(command, state, target or state)
    elif command is C.CONTINUE and state in (T.PARTIAL, T.COMPLETED, T.FAILED):
        assert outcome == Continued(closed=state, state=T.QUEUED)
    else:
        assert isinstance(outcome, Refused)
        assert outcome.reason is _expected_refusal(state, command)
        assert str(state) in outcome.message and str(command) in outcome.message


def test_create() -> None:
    assert decide_task(None, C.CREATE) == Moved(C.CREATE, None, T.PLANNED)
    for command in set(C) - {C.CREATE}:
        refused = decide_task(None, command)
        assert isinstance(refused, Refused) and refused.reason is Refusal.TASK_NOT_FOUND


@pytest.mark.parametrize("state", sorted(ALL - OPEN))
def test_a_finished_task_never_reopens(state: T) -> None:
    for command in C:
        outcome = decide_task(state, command)
        assert not isinstance(outcome, Moved), (state, command)
        if isinstance(outcome, Continued):
            # the finished plan version keeps its state; only a new version goes on
            assert command is C.CONTINUE and outcome.closed is state
            assert not outcome.state.terminal
    assert not [key for key in TASK_TRANSITIONS if key[0].terminal]


def test_continue_only_from_a_finished_task_and_never_after_cancel() -> None:
    for state in T:
        outcome = decide_task(state, C.CONTINUE)
        if state in (T.PARTIAL, T.COMPLETED, T.FAILED):
            assert isinstance(outcome, Continued)
        elif state is T.CANCELLED:
            assert isinstance(outcome, Refused) and outcome.reason is Refusal.TASK_CANCELLED
        else:
            assert isinstance(outcome, Refused) and outcome.reason is Refusal.TASK_NOT_FINISHED
    assert set(CONTINUATIONS) == {T.PARTIAL, T.COMPLETED, T.FAILED}


def _reachable() -> set[T]:
    seen, todo = {T.PLANNED}, [T.PLANNED]
    while todo:
        state = todo.pop()
        for (source, _), after in TASK_TRANSITIONS.items():
            if source is state and after not in seen:
                seen.add(after)
                todo.append(after)
    return seen


def test_every_state_is_reachable_and_every_open_state_can_finish() -> None:
    assert _reachable() == ALL
    for state in OPEN:
        assert decide_task(state, C.CANCEL) == Moved(C.CANCEL, state, T.CANCELLED)


def test_state_properties() -> None:
    assert {s for s in T if s.terminal} == ALL - OPEN
    assert {s for s in T if s.active} == {T.RUNNING, T.VERIFYING}
    assert {s for s in T if s.leased} == {T.RUNNING, T.VERIFYING, T.WAITING_FOR_APPROVAL}
    assert TASK_NOT_TERMINAL == OPEN
    assert [e.tier for e in (E.PURE, E.IDEMPOTENT, E.QUERYABLE, E.NON_IDEMPOTENT)] == [0, 1, 2, 3]


# -- steps ------------------------------------------------------------------------------------

STEP_EXPECTED: Final[dict[tuple[S, SC], S]] = {
    (S.PENDING, SC.BEGIN): S.RUNNING,
    (S.PENDING, SC.SKIP): S.SKIPPED,
    (S.BLOCKED, SC.BEGIN): S.RUNNING,
    (S.BLOCKED, SC.SKIP): S.SKIPPED,
    (S.BLOCKED, SC.FAIL): S.FAILED,
    (S.RUNNING, SC.RECORD_INTENT): S.RUNNING,
    (S.RUNNING, SC.RECORD_RECEIPT): S.RUNNING,
    (S.RUNNING, SC.COMPLETE): S.COMPLETED,
    (S.RUNNING, SC.MARK_UNCERTAIN): S.UNCERTAIN,
    (S.RUNNING, SC.BLOCK): S.BLOCKED,
    (S.RUNNING, SC.FAIL): S.FAILED,
    (S.UNCERTAIN, SC.BEGIN): S.RUNNING,
    (S.UNCERTAIN, SC.COMPLETE): S.COMPLETED,
    (S.UNCERTAIN, SC.SKIP): S.SKIPPED,
    (S.UNCERTAIN, SC.FAIL): S.FAILED,
    (S.FAILED, SC.SKIP): S.SKIPPED,  # a person's resolution of recovery_required
    (S.FAILED, SC.REOPEN): S.PENDING,
}
#: Moves a person alone makes (basis ``user``), never the attempt.
PERSON_ONLY: Final = {(S.FAILED, SC.SKIP), (S.FAILED, SC.REOPEN)}
B = Basis
#: The bases on which an uncertain step may make each move, per class.
UNCERTAIN_OK: Final[dict[tuple[SC, E], set[Basis]]] = {
    (SC.BEGIN, E.PURE): {B.CLASS_SAFE, B.NO_INTENT, B.USER},
    (SC.BEGIN, E.IDEMPOTENT): {B.CLASS_SAFE, B.NO_INTENT, B.USER},
    (SC.BEGIN, E.QUERYABLE): {B.PROBE_NOT_DONE, B.NO_INTENT, B.USER},
    (SC.BEGIN, E.NON_IDEMPOTENT): {B.NO_INTENT, B.USER},
    **{(SC.COMPLETE, e): {B.EVIDENCE, B.RECEIPT, B.USER} for e in E},
    (SC.COMPLETE, E.QUERYABLE): {B.EVIDENCE, B.RECEIPT, B.USER, B.PROBE_DONE},
    **{(SC.SKIP, e): {B.USER} for e in E},
    **{(SC.FAIL, e): {B.USER} for e in E},
}


def _fitting(state: S, command: SC, effect: E, basis: Basis | None) -> Step:
    """A step whose record fits the command and makes ``basis`` true where it can be."""
    intent = command is SC.RECORD_RECEIPT or basis is B.RECEIPT
    return Step(
        index=0,
        state=state,
        side_effect=effect,
        intent_id="intent-1" if intent and basis is not B.NO_INTENT else None,
        receipt_id="receipt-1" if basis is B.RECEIPT else None,
        evidence=("ev-1",) if basis is B.EVIDENCE else (),
        probe={
            B.PROBE_DONE: ProbeResult.DONE,
            B.PROBE_NOT_DONE: ProbeResult.NOT_DONE,
        }.get(basis or B.USER, ProbeResult.NOT_PROBED),
    )


def _cases() -> Iterator[tuple[S, SC, E, Basis | None]]:
    return itertools.product(S, SC, E, [None, *Basis])


def _expected_step(state: S, command: SC, effect: E, basis: Basis | None) -> S | Refusal:
    after = STEP_EXPECTED.get((state, command))
    if after is None:
        finished = state in (S.COMPLETED, S.SKIPPED, S.FAILED)
        return Refusal.STEP_FINISHED if finished else Refusal.INVALID_STEP_TRANSITION
    if state is S.UNCERTAIN:
        if basis is None:
            return Refusal.BASIS_REQUIRED
        return after if basis in UNCERTAIN_OK[(command, effect)] else Refusal.BASIS_NOT_ACCEPTED
    if (state, command) in PERSON_ONLY:
        if basis is None:
            return Refusal.BASIS_REQUIRED
        return after if basis is B.USER else Refusal.BASIS_NOT_ACCEPTED
    if basis is None or (state, command, basis) == (S.RUNNING, SC.MARK_UNCERTAIN, B.HOLDER_GONE):
        return after
    return Refusal.BASIS_NOT_ACCEPTED


def test_every_step_command_in_every_step_state_class_and_basis() -> None:
    checked = 0
    for state, command, effect, basis in _cases():
        step = _fitting(state, command, effect, basis)
        outcome = decide_step(T.RUNNING, step, command, basis=basis, evidence=("ev-2",))
        expected = _expected_step(state, command, effect, basis)
        if isinstance(expected, Refusal):
            assert isinstance(outcome, Refused), (state, command, effect, basis, outcome)
            assert outcome.reason is expected, (state, command, effect, basis)
        else:
            assert outcome == StepMoved(command, state, expected, basis), (state, command, basis)
        checked += 1
    assert checked == len(S) * len(SC) * len(E) * (len(Basis) + 1)


def test_an_uncertain_non_idempotent_step_with_an_intent_runs_again_only_if_a_person_says() -> None:
    step = Step(0, S.UNCERTAIN, E.NON_IDEMPOTENT, intent_id="intent-1")
    for basis in Basis:
        outcome = decide_step(T.RUNNING, step, SC.BEGIN, basis=basis)
        assert isinstance(outcome, StepMoved) is (basis is B.USER), basis
    contradicted = decide_step(T.RUNNING, step, SC.BEGIN, basis=B.NO_INTENT)
    assert isinstance(contradicted, Refused)
    assert contradicted.reason is Refusal.BASIS_CONTRADICTS_RECORD


@pytest.mark.parametrize("task", list(T))
def test_the_attempt_acts_on_steps_only_while_the_task_runs(task: T) -> None:
    outcome = decide_step(task, Step(0, S.PENDING, E.PURE), SC.BEGIN)
    if task is T.RUNNING:
        assert isinstance(outcome, StepMoved)
        return
    assert isinstance(outcome, Refused)
    if task is T.VERIFYING:
        assert outcome.reason is Refusal.TASK_VERIFYING  # no side-effect step while verifying
    else:
        assert outcome.reason is (
            Refusal.TASK_TERMINAL if task.terminal else Refusal.TASK_NOT_RUNNING
        )


@pytest.mark.parametrize("task", list(T))
def test_resolutions_and_dead_holders_by_task_state(task: T) -> None:
    uncertain = Step(0, S.UNCERTAIN, E.NON_IDEMPOTENT, intent_id="i")
    answered = decide_step(task, uncertain, SC.COMPLETE, basis=B.USER)
    assert isinstance(answered, StepMoved) is (task in OPEN)
    retried = decide_step(task, uncertain, SC.BEGIN, basis=B.USER)
    assert isinstance(retried, StepMoved) is (task is T.RUNNING)  # a retry needs an attempt
    held = Step(0, S.RUNNING, E.QUERYABLE, holder="att-dead")
    dead = decide_step(task, held, SC.MARK_UNCERTAIN, basis=B.HOLDER_GONE)
    assert dead == StepMoved(SC.MARK_UNCERTAIN, S.RUNNING, S.UNCERTAIN, B.HOLDER_GONE)


def _act(step: Step, command: SC, evidence: tuple[str, ...] = ()) -> Refusal | S:
    outcome = decide_step(T.RUNNING, step, command, evidence=evidence)
    return outcome.reason if isinstance(outcome, Refused) else outcome.after


def test_the_record_of_a_try_gates_the_attempts_acts() -> None:
    fresh = Step(0, S.RUNNING, E.NON_IDEMPOTENT)
    intended = Step(0, S.RUNNING, E.NON_IDEMPOTENT, intent_id="i")
    received = Step(0, S.RUNNING, E.NON_IDEMPOTENT, intent_id="i", receipt_id="r")
    assert _act(fresh, SC.RECORD_RECEIPT) is Refusal.INTENT_REQUIRED
    assert _act(fresh, SC.COMPLETE) is Refusal.EVIDENCE_REQUIRED
    assert _act(fresh, SC.COMPLETE, ("ev",)) is S.COMPLETED  # it decided no effect was needed
    assert _act(intended, SC.RECORD_INTENT) is Refusal.OPEN_INTENT
    for command in (SC.COMPLETE, SC.BLOCK, SC.FAIL):
        # the effect may have happened: only its receipt or "uncertain" may follow
        assert _act(intended, command, ("ev",)) is Refusal.OPEN_INTENT
    assert _act(intended, SC.RECORD_RECEIPT) is S.RUNNING
    assert _act(intended, SC.MARK_UNCERTAIN) is S.UNCERTAIN
    assert _act(received, SC.RECORD_RECEIPT) is Refusal.RECEIPT_ALREADY_RECORDED
    assert _act(received, SC.RECORD_INTENT) is Refusal.INTENT_ALREADY_RECORDED
    assert _act(received, SC.COMPLETE) is S.COMPLETED  # the receipt is its evidence


def test_a_basis_must_agree_with_the_record() -> None:
    step = Step(0, S.UNCERTAIN, E.QUERYABLE, intent_id="i", probe=ProbeResult.UNKNOWN)
    for command, basis in [
        (SC.COMPLETE, B.RECEIPT),
        (SC.COMPLETE, B.EVIDENCE),
        (SC.COMPLETE, B.PROBE_DONE),
        (SC.BEGIN, B.PROBE_NOT_DONE),
        (SC.BEGIN, B.NO_INTENT),
    ]:
        outcome = decide_step(T.RUNNING, step, command, basis=basis)
        assert isinstance(outcome, Refused), (command, basis)
        assert outcome.reason is Refusal.BASIS_CONTRADICTS_RECORD


def test_a_begin_starts_a_fresh_try() -> None:
    moves = [
        decide_step(T.RUNNING, Step(0, S.PENDING, E.PURE), SC.BEGIN),
        decide_step(T.RUNNING, Step(0, S.RUNNING, E.PURE), SC.MARK_UNCERTAIN),
    ]
    assert [m.fresh_try for m in moves if isinstance(m, StepMoved)] == [True, False]


def test_verification_waits_for_every_effect_to_settle() -> None:
    done = [Step(0, S.COMPLETED, E.PURE), Step(1, S.SKIPPED, E.QUERYABLE)]
    assert verification_refusal([*done, Step(2, S.PENDING, E.PURE)]) is None
    for state in (S.RUNNING, S.UNCERTAIN):
        refused = verification_refusal([*done, Step(2, state, E.IDEMPOTENT)])
        assert refused is not None and refused.reason is Refusal.OPEN_STEP
