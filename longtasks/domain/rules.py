"""The legal moves of a long task and of its steps, as data (seed C "状态模型", "安全恢复").

Two tables and their decision functions, no I/O:
- ``TASK_TRANSITIONS``: (task state, command) -> next state; ``CONTINUATIONS`` for
  ``continue``, the one command a finished task accepts: the finished plan version keeps its
  terminal state as its record and a new plan version starts queued with a new attempt.
- ``STEP_TRANSITIONS``: (step state, command) -> next state, with ``UNCERTAIN_EXITS``: the
  bases on which a step may leave ``uncertain``, per side-effect class. No basis lets a step
  whose non-idempotent effect may have happened run again unless a person said so.

Everything not in a table is refused with a stable ``Refusal`` (a value, never an exception:
the service maps it to an API error). docs/long-tasks.md is generated from these tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from longtasks.domain.model import Step
from longtasks.domain.states import (
    TASK_NOT_TERMINAL,
    Basis,
    ProbeResult,
    StepState,
    TaskState,
)
from longtasks.domain.states import SideEffect as E
from longtasks.domain.states import StepState as S
from longtasks.domain.states import TaskState as T


class TaskCommand(StrEnum):
    CREATE = "create"  # goal, constraints, criteria and the first plan version
    REVISE_PLAN = "revise_plan"  # a new plan version (also: waive or edit a criterion)
    ENQUEUE = "enqueue"  # start: ready for an attempt once a slot is free
    ATTEMPT_STARTED = "attempt_started"  # an attempt took the lease
    STEP_BEGAN = "step_began"  # the attempt began a step (steps only while running)
    REQUEST_DECISION = "request_decision"  # open a decision for a person
    DECISION_ANSWERED = "decision_answered"  # a person answered; a new attempt goes on
    REQUEST_APPROVAL = "request_approval"  # the attempt waits for a grant of one action
    APPROVAL_GRANTED = "approval_granted"
    APPROVAL_DENIED = "approval_denied"  # the attempt goes on without the action
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    CONTINUE = "continue"  # a finished task: new plan version + new attempt (CONTINUATIONS)
    READY_FOR_VERIFICATION = "ready_for_verification"  # the model's "done": check it
    VERIFICATION_PASSED = "verification_passed"  # every required criterion evidenced
    VERIFICATION_INCOMPLETE = "verification_incomplete"  # unmet criteria, no way on
    START_CORRECTION = "start_correction"  # unmet criteria, corrections left: work again
    ATTEMPT_ENDED_RESUMABLE = "attempt_ended_resumable"  # recovery: safe to go on by itself
    ATTEMPT_ENDED_ASK_USER = "attempt_ended_ask_user"  # recovery: an effect only a person knows
    ATTEMPT_ENDED_NEEDS_REVIEW = "attempt_ended_needs_review"  # recovery: needs a check
    RECOVERY_CLEARED = "recovery_cleared"  # the check is done: go on
    BUDGET_EXHAUSTED = "budget_exhausted"  # tokens, attempts or lifetime used up
    FAIL = "fail"  # a failure boundary: no safe and useful way on


class StepCommand(StrEnum):
    BEGIN = "begin"  # start a try (from uncertain: a retry, which needs a basis)
    RECORD_INTENT = "record_intent"  # before an effect: target, time, summary
    RECORD_RECEIPT = "record_receipt"  # after the effect: what the outside world answered
    COMPLETE = "complete"  # with evidence references
    MARK_UNCERTAIN = "mark_uncertain"
    SKIP = "skip"
    BLOCK = "block"
    FAIL = "fail"
    REOPEN = "reopen"  # a failed step back to pending: only on a person's word (a retry)


class Refusal(StrEnum):
    """Why a command was refused; stable, for clients to branch on."""

    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    TASK_EXISTS = "TASK_EXISTS"
    TASK_TERMINAL = "TASK_TERMINAL"
    TASK_CANCELLED = "TASK_CANCELLED"
    TASK_NOT_FINISHED = "TASK_NOT_FINISHED"
    TASK_VERIFYING = "TASK_VERIFYING"
    OPEN_QUESTION = "OPEN_QUESTION"
    INVALID_TASK_TRANSITION = "INVALID_TASK_TRANSITION"
    TASK_NOT_RUNNING = "TASK_NOT_RUNNING"
    STEP_FINISHED = "STEP_FINISHED"
    INVALID_STEP_TRANSITION = "INVALID_STEP_TRANSITION"
    BASIS_REQUIRED = "BASIS_REQUIRED"
    BASIS_NOT_ACCEPTED = "BASIS_NOT_ACCEPTED"
    BASIS_CONTRADICTS_RECORD = "BASIS_CONTRADICTS_RECORD"
    OPEN_INTENT = "OPEN_INTENT"
    EFFECT_ATTEMPTED = "EFFECT_ATTEMPTED"
    INTENT_ALREADY_RECORDED = "INTENT_ALREADY_RECORDED"
    INTENT_REQUIRED = "INTENT_REQUIRED"
    RECEIPT_ALREADY_RECORDED = "RECEIPT_ALREADY_RECORDED"
    EVIDENCE_REQUIRED = "EVIDENCE_REQUIRED"
    OPEN_STEP = "OPEN_STEP"
    INVALID_PLAN = "INVALID_PLAN"  # a plan with no step, or one step id twice
    ATTEMPT_OPEN = "ATTEMPT_OPEN"  # the previous attempt has not ended yet
    DECISION_CLOSED = "DECISION_CLOSED"  # the decision was answered or expired already
    ANSWER_NOT_OFFERED = "ANSWER_NOT_OFFERED"  # not one of the answers its kind takes
    NO_STOPPED_STEP = "NO_STOPPED_STEP"  # skip: recovery_required stopped at no step


C = TaskCommand

#: What ``create`` makes; every other command needs an existing task.
CREATED = T.PLANNED
#: A plan may be revised whenever the task is unfinished, except while the criteria of the
#: current version are being checked.
REVISABLE = TASK_NOT_TERMINAL - {T.VERIFYING}
#: Pause only what has nothing open for a person (the seed: a paused task has no question).
PAUSABLE = frozenset({T.PLANNED, T.QUEUED, T.RUNNING, T.VERIFYING})


def _rows(
    command: TaskCommand, sources: Iterable[TaskState], target: TaskState | None = None
) -> dict[tuple[TaskState, TaskCommand], TaskState]:
    """``command`` from each of ``sources`` to ``target`` (None: the state stays)."""
    return {(s, command): target or s for s in sources}


TASK_TRANSITIONS: Mapping[tuple[TaskState, TaskCommand], TaskState] = {
    **_rows(C.REVISE_PLAN, REVISABLE),
    **_rows(C.ENQUEUE, [T.PLANNED], T.QUEUED),
    **_rows(C.ATTEMPT_STARTED, [T.QUEUED], T.RUNNING),
    **_rows(C.STEP_BEGAN, [T.RUNNING]),
    **_rows(C.REQUEST_DECISION, [T.RUNNING, T.VERIFYING, T.RECOVERY_REQUIRED], T.WAITING_FOR_USER),
    **_rows(C.DECISION_ANSWERED, [T.WAITING_FOR_USER], T.QUEUED),
    **_rows(C.REQUEST_APPROVAL, [T.RUNNING], T.WAITING_FOR_APPROVAL),
    **_rows(C.APPROVAL_GRANTED, [T.WAITING_FOR_APPROVAL], T.RUNNING),
    **_rows(C.APPROVAL_DENIED, [T.WAITING_FOR_APPROVAL], T.RUNNING),
    **_rows(C.PAUSE, PAUSABLE, T.PAUSED),
    **_rows(C.RESUME, [T.PAUSED], T.QUEUED),
    **_rows(C.CANCEL, TASK_NOT_TERMINAL, T.CANCELLED),
    **_rows(C.READY_FOR_VERIFICATION, [T.RUNNING], T.VERIFYING),
    **_rows(C.VERIFICATION_PASSED, [T.VERIFYING], T.COMPLETED),
    **_rows(C.VERIFICATION_INCOMPLETE, [T.VERIFYING], T.PARTIAL),
    **_rows(C.START_CORRECTION, [T.VERIFYING], T.RUNNING),
    **_rows(C.ATTEMPT_ENDED_RESUMABLE, [T.RUNNING, T.VERIFYING, T.WAITING_FOR_APPROVAL], T.QUEUED),
    # verification has no effects, so its interruption never leaves a question for a person
    **_rows(C.ATTEMPT_ENDED_ASK_USER, [T.RUNNING, T.WAITING_FOR_APPROVAL], T.WAITING_FOR_USER),
    **_rows(
        C.ATTEMPT_ENDED_NEEDS_REVIEW,
        [T.RUNNING, T.VERIFYING, T.WAITING_FOR_APPROVAL],
        T.RECOVERY_REQUIRED,
    ),
    **_rows(C.RECOVERY_CLEARED, [T.RECOVERY_REQUIRED], T.QUEUED),
    **_rows(C.BUDGET_EXHAUSTED, TASK_NOT_TERMINAL, T.PARTIAL),
    **_rows(C.FAIL, TASK_NOT_TERMINAL, T.FAILED),
}

#: ``continue``: finished state (kept as the old plan version's record) -> the state the new
#: plan version starts in. A cancelled task never starts again.
CONTINUATIONS: Mapping[TaskState, TaskState] = {
    T.PARTIAL: T.QUEUED,
    T.COMPLETED: T.QUEUED,
    T.FAILED: T.QUEUED,
}

#: Refusals more telling than INVALID_TASK_TRANSITION.
TASK_REFUSALS: Mapping[tuple[TaskState, TaskCommand], Refusal] = {
    (T.VERIFYING, C.STEP_BEGAN): Refusal.TASK_VERIFYING,
    (T.VERIFYING, C.REVISE_PLAN): Refusal.TASK_VERIFYING,
    **{
        (s, C.PAUSE): Refusal.OPEN_QUESTION
        for s in (T.WAITING_FOR_USER, T.WAITING_FOR_APPROVAL, T.RECOVERY_REQUIRED)
    },
    (T.CANCELLED, C.CONTINUE): Refusal.TASK_CANCELLED,
}


@dataclass(frozen=True, slots=True)
class Moved:
    command: TaskCommand
    before: TaskState | None  # None: the task did not exist (create)
    after: TaskState


@dataclass(frozen=True, slots=True)
class Continued:
    """``continue`` on a finished task: the finished plan version keeps ``closed`` as its
    record, untouched; a new plan version and a new attempt start, the task in ``state``."""

    closed: TaskState
    state: TaskState


@dataclass(frozen=True, slots=True)
class Refused:
    reason: Refusal
    message: str


def decide_task(state: TaskState | None, command: TaskCommand) -> Moved | Continued | Refused:
    """What ``command`` does to a task in ``state`` (None: no such task yet)."""
    if state is None:
        if command is C.CREATE:
            return Moved(command, None, CREATED)
        return Refused(Refusal.TASK_NOT_FOUND, f"no task to {command}")
    after = TASK_TRANSITIONS.get((state, command))
    if after is not None:
        return Moved(command, state, after)
    if command is C.CONTINUE and state in CONTINUATIONS:
        return Continued(state, CONTINUATIONS[state])
    return _task_refusal(state, command)


def _task_refusal(state: TaskState, command: TaskCommand) -> Refused:
    reason = TASK_REFUSALS.get((state, command))
    if reason is None and command is C.CREATE:
        reason = Refusal.TASK_EXISTS
    elif reason is None and command is C.CONTINUE:
        reason = Refusal.TASK_NOT_FINISHED
    elif reason is None:
        reason = Refusal.TASK_TERMINAL if state.terminal else Refusal.INVALID_TASK_TRANSITION
    return Refused(reason, f"a task in {state} cannot {command}")


# -- steps ------------------------------------------------------------------------------------

SC = StepCommand

STEP_TRANSITIONS: Mapping[tuple[StepState, StepCommand], StepState] = {
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
    (S.UNCERTAIN, SC.BEGIN): S.RUNNING,  # a retry
    (S.UNCERTAIN, SC.COMPLETE): S.COMPLETED,
    (S.UNCERTAIN, SC.SKIP): S.SKIPPED,
    (S.UNCERTAIN, SC.FAIL): S.FAILED,
    # a person's resolution of a failed step (resolutions.py): done, skip; not done, reopen
    (S.FAILED, SC.SKIP): S.SKIPPED,
    (S.FAILED, SC.REOPEN): S.PENDING,
}

_ANY_CLASS = tuple(E)
_RETRY_BASES: Mapping[E, frozenset[Basis]] = {
    E.PURE: frozenset({Basis.CLASS_SAFE, Basis.NO_INTENT, Basis.USER}),
    E.IDEMPOTENT: frozenset({Basis.CLASS_SAFE, Basis.NO_INTENT, Basis.USER}),
    E.QUERYABLE: frozenset({Basis.PROBE_NOT_DONE, Basis.NO_INTENT, Basis.USER}),
    # the effect may have happened and nothing outside can tell: only a person may say
    # "run it again" (or no intent was recorded: nothing was ever started)
    E.NON_IDEMPOTENT: frozenset({Basis.NO_INTENT, Basis.USER}),
}
_PROVEN = frozenset({Basis.EVIDENCE, Basis.RECEIPT, Basis.USER})

#: (command, side-effect class) -> the bases on which an uncertain step may make that move.
UNCERTAIN_EXITS: Mapping[tuple[StepCommand, E], frozenset[Basis]] = {
    **{(SC.BEGIN, e): bases for e, bases in _RETRY_BASES.items()},
    **{(SC.COMPLETE, e): _PROVEN for e in _ANY_CLASS},
    (SC.COMPLETE, E.QUERYABLE): _PROVEN | {Basis.PROBE_DONE},
    **{(SC.SKIP, e): frozenset({Basis.USER}) for e in _ANY_CLASS},
    **{(SC.FAIL, e): frozenset({Basis.USER}) for e in _ANY_CLASS},
}
#: The only basis a move from another state may name: reconciling a dead holder's step.
OTHER_BASES: Mapping[tuple[StepState, StepCommand], frozenset[Basis]] = {
    (S.RUNNING, SC.MARK_UNCERTAIN): frozenset({Basis.HOLDER_GONE}),
    (S.FAILED, SC.SKIP): frozenset({Basis.USER}),
    (S.FAILED, SC.REOPEN): frozenset({Basis.USER}),
}
#: Moves only a person makes: without a basis (the attempt's own act) they are refused.
PERSON_ONLY = frozenset({(S.FAILED, SC.SKIP), (S.FAILED, SC.REOPEN)})
#: What the step's record must show for a basis to be true.
BASIS_FACTS: Mapping[Basis, Callable[[Step], bool]] = {
    Basis.EVIDENCE: lambda step: bool(step.evidence),
    Basis.RECEIPT: lambda step: step.receipt,
    Basis.CLASS_SAFE: lambda step: step.side_effect in (E.PURE, E.IDEMPOTENT),
    Basis.NO_INTENT: lambda step: not step.intent,
    Basis.PROBE_DONE: lambda step: step.probe is ProbeResult.DONE,
    Basis.PROBE_NOT_DONE: lambda step: step.probe is ProbeResult.NOT_DONE,
    Basis.USER: lambda step: True,  # the service checks the answered decision
    Basis.HOLDER_GONE: lambda step: True,  # the service checks the holder is dead
}

#: Task states in which the attempt may act on steps (no basis: the attempt's own act).
ATTEMPT_GATE = frozenset({T.RUNNING})
#: Task states in which a move with a basis (a recovery, a person's answer) may happen. A
#: retry runs the step, so it needs a live attempt; a dead holder's step becomes uncertain
#: whatever the task's state, because a running step with no live holder would be a lie.
RESOLUTION_GATE: Mapping[StepCommand, frozenset[TaskState]] = {
    SC.BEGIN: ATTEMPT_GATE,
    SC.COMPLETE: TASK_NOT_TERMINAL,
    SC.SKIP: TASK_NOT_TERMINAL,
    SC.FAIL: TASK_NOT_TERMINAL,
    SC.REOPEN: TASK_NOT_TERMINAL,
    SC.MARK_UNCERTAIN: frozenset(TaskState),
}
#: With an intent but no receipt, the attempt may only record the receipt or say it does
#: not know: completing, blocking or failing could hide an effect that happened.
OPEN_INTENT_ALLOWS = frozenset({SC.RECORD_RECEIPT, SC.MARK_UNCERTAIN})


@dataclass(frozen=True, slots=True)
class StepMoved:
    command: StepCommand
    before: StepState
    after: StepState
    basis: Basis | None

    @property
    def fresh_try(self) -> bool:
        """A new try: the step's intent, receipt and probe of the last try no longer apply
        (``reopen``: a person said the failed try's work was not done)."""
        return self.command in (SC.BEGIN, SC.REOPEN)


def decide_step(
    task: TaskState,
    step: Step,
    command: StepCommand,
    *,
    basis: Basis | None = None,
    evidence: tuple[str, ...] = (),
) -> StepMoved | Refused:
    """What ``command`` does to ``step`` of a task in ``task``. ``basis``: None for the
    attempt's own act, else the fact that makes a recovery or a person's move safe;
    ``evidence``: references given with ``complete``."""
    after = STEP_TRANSITIONS.get((step.state, command))
    if after is None:
        reason = Refusal.STEP_FINISHED if step.state.finished else Refusal.INVALID_STEP_TRANSITION
        return Refused(reason, f"a {step.state} step cannot {command}")
    refusal = (
        _basis_refusal(step, command, basis)
        or _gate_refusal(task, command, basis)
        or _record_refusal(step, command, basis, evidence)
    )
    return refusal or StepMoved(command, step.state, after, basis)


def _basis_refusal(step: Step, command: StepCommand, basis: Basis | None) -> Refused | None:
    if step.state is S.UNCERTAIN:
        accepted = UNCERTAIN_EXITS[(command, step.side_effect)]
        if basis is None:
            return Refused(
                Refusal.BASIS_REQUIRED, f"an uncertain step cannot {command} without a basis"
            )
    else:
        accepted = OTHER_BASES.get((step.state, command), frozenset())
        if basis is None and (step.state, command) in PERSON_ONLY:
            why = f"only a person may {command} a {step.state} step"
            return Refused(Refusal.BASIS_REQUIRED, why)
        if basis is None:
            return None
    if basis not in accepted:
        why = f"{basis} is no ground to {command} a {step.state} {step.side_effect} step"
        return Refused(Refusal.BASIS_NOT_ACCEPTED, why)
    if not BASIS_FACTS[basis](step):
        return Refused(Refusal.BASIS_CONTRADICTS_RECORD, f"the step's record contradicts {basis}")
    return None


def _gate_refusal(task: TaskState, command: StepCommand, basis: Basis | None) -> Refused | None:
    gate = ATTEMPT_GATE if basis is None else RESOLUTION_GATE[command]
    if task in gate:
        return None
    if task is T.VERIFYING:
        reason = Refusal.TASK_VERIFYING
    else:
        reason = Refusal.TASK_TERMINAL if task.terminal else Refusal.TASK_NOT_RUNNING
    return Refused(reason, f"no step may {command} while the task is {task}")


def _record_refusal(
    step: Step, command: StepCommand, basis: Basis | None, evidence: tuple[str, ...]
) -> Refused | None:
    """The attempt's own acts must agree with what its try recorded so far."""
    if basis is not None:
        return None
    if step.open_intent and command not in OPEN_INTENT_ALLOWS:
        return Refused(Refusal.OPEN_INTENT, "an intent has no receipt: record it or mark uncertain")
    reason = None
    if command is SC.RECORD_INTENT and step.intent:
        reason = Refusal.INTENT_ALREADY_RECORDED
    elif command is SC.RECORD_RECEIPT and not step.intent:
        reason = Refusal.INTENT_REQUIRED
    elif command is SC.RECORD_RECEIPT and step.receipt:
        reason = Refusal.RECEIPT_ALREADY_RECORDED
    elif command is SC.COMPLETE and not (evidence or step.evidence or step.receipt):
        reason = Refusal.EVIDENCE_REQUIRED
    elif command is SC.BLOCK and step.intent:
        # blocked means nothing was done: a later begin must not repeat a done effect
        reason = Refusal.EFFECT_ATTEMPTED
    return None if reason is None else Refused(reason, f"cannot {command}: {reason}")


def verification_refusal(steps: Iterable[Step]) -> Refused | None:
    """``ready_for_verification`` needs every effect settled: no step running or uncertain
    (None: nothing stands in the way)."""
    open_steps = [s.index for s in steps if s.state in (S.RUNNING, S.UNCERTAIN)]
    if not open_steps:
        return None
    return Refused(Refusal.OPEN_STEP, f"steps {open_steps} are still running or uncertain")
