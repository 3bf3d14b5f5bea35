"""Safe recovery (seed C "安全恢复"), pure: what to do with an interrupted step, where the
task goes on from, and what a restart does to steps whose holder died.

The recovery reads the step records, never the original prompt. Once the lease holder is
known to be gone (the attempt's run ended), the last running or uncertain step is decided
by ``RECOVERY_RULES``, first match wins:

- trusted completion evidence, or a receipt -> ``skip`` (complete it with that evidence);
- pure or idempotent -> ``retry``;
- queryable -> ``probe_first``, then skip (done), retry (not done) or ask (unknown);
- non_idempotent with an intent recorded -> ``ask_user``, the intent as the question's
  material. Nothing retries it automatically, ever.

A step with no intent recorded never started an effect (the intent is written before any
effect is allowed), so running it is a first run, not a replay: ``retry`` on ``no_intent``.
Every answer is also a legal move of ``rules.decide_step`` (tests hold the two together).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from longtasks.domain.model import Step
from longtasks.domain.rules import StepCommand, StepMoved, TaskCommand, decide_step
from longtasks.domain.states import Basis, ProbeResult, SideEffect, StepState, TaskState

E = SideEffect
P = ProbeResult


class RecoveryAction(StrEnum):
    SKIP = "skip"  # its effect is proven: complete it with that evidence, go past it
    RETRY = "retry"  # run it again in the next attempt
    PROBE_FIRST = "probe_first"  # run its read-only probe in the next attempt, then decide
    ASK_USER = "ask_user"  # only a person can tell: waiting_for_user, the intent as material


#: The step move each action makes (probe_first and ask_user make none yet).
ACTION_COMMANDS: dict[RecoveryAction, StepCommand | None] = {
    RecoveryAction.SKIP: StepCommand.COMPLETE,
    RecoveryAction.RETRY: StepCommand.BEGIN,
    RecoveryAction.PROBE_FIRST: None,
    RecoveryAction.ASK_USER: None,
}


@dataclass(frozen=True, slots=True)
class RecoveryRule:
    """One row of the decision table; a None condition matches anything."""

    action: RecoveryAction
    basis: Basis | None
    why: str
    classes: frozenset[SideEffect] = frozenset(SideEffect)
    evidence: bool | None = None
    receipt: bool | None = None
    intent: bool | None = None
    probes: frozenset[ProbeResult] | None = None

    def matches(self, step: Step) -> bool:
        wanted = (
            (self.evidence, bool(step.evidence)),
            (self.receipt, step.receipt),
            (self.intent, step.intent),
        )
        return (
            step.side_effect in self.classes
            and all(want is None or want == have for want, have in wanted)
            and (self.probes is None or step.probe in self.probes)
        )


R = RecoveryAction
_Q = frozenset({E.QUERYABLE})
_N = frozenset({E.NON_IDEMPOTENT})

RECOVERY_RULES: tuple[RecoveryRule, ...] = (
    RecoveryRule(R.SKIP, Basis.EVIDENCE, "trusted completion evidence is recorded", evidence=True),
    RecoveryRule(R.SKIP, Basis.RECEIPT, "its receipt proves the effect happened", receipt=True),
    RecoveryRule(
        R.RETRY, Basis.CLASS_SAFE, "it has no external effect", classes=frozenset({E.PURE})
    ),
    RecoveryRule(
        R.RETRY,
        Basis.CLASS_SAFE,
        "its idempotency key makes a repeat harmless",
        classes=frozenset({E.IDEMPOTENT}),
    ),
    RecoveryRule(
        R.PROBE_FIRST,
        None,
        "the outside world must be asked first",
        classes=_Q,
        probes=frozenset({P.NOT_PROBED}),
    ),
    RecoveryRule(
        R.SKIP, Basis.PROBE_DONE, "the probe found it done", classes=_Q, probes=frozenset({P.DONE})
    ),
    RecoveryRule(
        R.RETRY,
        Basis.PROBE_NOT_DONE,
        "the probe found it not done",
        classes=_Q,
        probes=frozenset({P.NOT_DONE}),
    ),
    RecoveryRule(R.RETRY, Basis.NO_INTENT, "no intent: no effect was ever started", intent=False),
    RecoveryRule(
        R.ASK_USER,
        None,
        "the probe cannot tell whether the recorded intent took effect",
        classes=_Q,
        intent=True,
        probes=frozenset({P.UNKNOWN}),
    ),
    RecoveryRule(
        R.ASK_USER,
        None,
        "the recorded intent may have taken effect and cannot be checked or repeated",
        classes=_N,
        intent=True,
    ),
)


@dataclass(frozen=True, slots=True)
class StepRecovery:
    step_index: int
    action: RecoveryAction
    basis: Basis | None  # the basis of the step move (skip, retry)
    why: str
    material: str | None = None  # ask_user: the intent the question is about

    @property
    def command(self) -> StepCommand | None:
        return ACTION_COMMANDS[self.action]


def recover_step(step: Step) -> StepRecovery:
    """The recovery of a running (its holder is gone) or uncertain step."""
    if step.state not in (StepState.RUNNING, StepState.UNCERTAIN):
        raise ValueError(f"only a running or uncertain step is recovered, not {step.state}")
    rule = next(r for r in RECOVERY_RULES if r.matches(step))
    material = step.intent_id if rule.action is R.ASK_USER else None
    return StepRecovery(step.index, rule.action, rule.basis, rule.why, material)


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a task goes after its attempt ended without finishing."""

    command: TaskCommand  # one of the three attempt_ended_* commands
    step_index: int | None  # where the next attempt goes on (None: every step finished)
    recoveries: tuple[StepRecovery, ...]  # the open steps decided, in plan order
    why: str


_ENDED = {
    R.RETRY: TaskCommand.ATTEMPT_ENDED_RESUMABLE,
    R.PROBE_FIRST: TaskCommand.ATTEMPT_ENDED_RESUMABLE,
    R.ASK_USER: TaskCommand.ATTEMPT_ENDED_ASK_USER,
}


def resume_point(steps: Sequence[Step]) -> Resume:
    """The first safe unfinished step of a linear plan, after an attempt that was working on
    steps ended. Proven open steps are skipped past; the first that is not stops there."""
    decided: list[StepRecovery] = []
    for step in steps:
        if step.state in (StepState.COMPLETED, StepState.SKIPPED):
            continue
        if step.state is StepState.FAILED:
            why = f"step {step.index} failed: a new plan version or a person decides"
            return Resume(TaskCommand.ATTEMPT_ENDED_NEEDS_REVIEW, step.index, (*decided,), why)
        if step.state in (StepState.PENDING, StepState.BLOCKED):
            why = f"go on from step {step.index}"
            return Resume(TaskCommand.ATTEMPT_ENDED_RESUMABLE, step.index, (*decided,), why)
        recovery = recover_step(step)
        decided.append(recovery)
        if recovery.action is not R.SKIP:
            why = f"step {step.index}: {recovery.action} ({recovery.why})"
            return Resume(_ENDED[recovery.action], step.index, (*decided,), why)
    why = "every step is finished: check the acceptance criteria"
    return Resume(TaskCommand.ATTEMPT_ENDED_RESUMABLE, None, (*decided,), why)


def after_verification_interrupted(interruptions: int, limit: int) -> TaskCommand:
    """An attempt ended while verifying: verification has no effects, so nothing becomes
    uncertain; it is run again in full (deterministic results may be kept,
    ``completion.kept_after_interruption``), until ``interruptions`` on one plan version
    reach ``limit``: then a person looks (recovery_required)."""
    if interruptions >= limit:
        return TaskCommand.ATTEMPT_ENDED_NEEDS_REVIEW
    return TaskCommand.ATTEMPT_ENDED_RESUMABLE


def held_by_the_dead(
    task: TaskState, steps: Iterable[Step], live_holders: frozenset[str]
) -> tuple[tuple[int, StepMoved], ...]:
    """On process start: every running step whose holder is not alive becomes uncertain,
    never pending (it may have had its effect). The moves, by step index."""
    moves = []
    for step in steps:
        if step.state is StepState.RUNNING and step.holder not in live_holders:
            move = decide_step(task, step, StepCommand.MARK_UNCERTAIN, basis=Basis.HOLDER_GONE)
            assert isinstance(move, StepMoved), move  # legal in every task state by the table
            moves.append((step.index, move))
    return tuple(moves)
