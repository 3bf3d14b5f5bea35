"""The vocabularies of long tasks, persisted as lowercase strings (seed C "状态模型").

The task states are exactly the seed's table; the machine never merges two of them (the
user-facing folding of running+verifying and of the two waits is ``display.py``'s alone).
"""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    """Where a long task stands."""

    PLANNED = "planned"  # goal and plan written, nothing started yet
    QUEUED = "queued"  # a next step is ready; waiting for a slot (no lease, nothing to answer)
    RUNNING = "running"  # an attempt holding the lease is working on steps
    VERIFYING = "verifying"  # steps done, the acceptance criteria being checked (no effects)
    WAITING_FOR_USER = "waiting_for_user"  # an open decision only a person can answer
    WAITING_FOR_APPROVAL = "waiting_for_approval"  # the attempt waits for an explicit grant
    PAUSED = "paused"  # paused by a person; nothing open, never continues by itself
    RECOVERY_REQUIRED = "recovery_required"  # interrupted; a check or a person must decide
    PARTIAL = "partial"  # terminal: useful results, a required criterion unmet, no path on
    COMPLETED = "completed"  # terminal: every required criterion has trusted evidence
    FAILED = "failed"  # terminal: a failure boundary, no safe and useful way on
    CANCELLED = "cancelled"  # terminal: cancelled by a person; no continuation ever starts

    @property
    def terminal(self) -> bool:
        """Finished: no command moves it again (``continue`` opens a new plan version)."""
        return self in TASK_TERMINAL

    @property
    def active(self) -> bool:
        """Holds one of its owner's concurrency slots (seed: running and verifying only)."""
        return self in TASK_ACTIVE

    @property
    def leased(self) -> bool:
        """A live attempt holds the task's lease (it may end, and then recovery decides)."""
        return self in TASK_LEASED


TASK_TERMINAL = frozenset(
    {TaskState.PARTIAL, TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED}
)
TASK_ACTIVE = frozenset({TaskState.RUNNING, TaskState.VERIFYING})
#: An approval is scoped to the attempt that asked for it, so that attempt stays alive while
#: it waits; it holds no concurrency slot (the seed: waiting tasks take no slot).
TASK_LEASED = TASK_ACTIVE | {TaskState.WAITING_FOR_APPROVAL}
TASK_NOT_TERMINAL = frozenset(TaskState) - TASK_TERMINAL


class StepState(StrEnum):
    """Where one step of a plan version stands."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    UNCERTAIN = "uncertain"  # may or may not have had its effect; never silently retried
    BLOCKED = "blocked"  # could not go on before attempting any effect: may begin again
    SKIPPED = "skipped"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in STEP_FINISHED


STEP_FINISHED = frozenset({StepState.COMPLETED, StepState.SKIPPED, StepState.FAILED})


class SideEffect(StrEnum):
    """How a step behaves when it is interrupted, lowest tier first (the order is the tier
    order of seed C's preflight: idempotent < queryable < non_idempotent, pure below all)."""

    PURE = "pure"  # no external effect: safe to run again
    IDEMPOTENT = "idempotent"  # a stable idempotency key makes a repeat harmless
    QUERYABLE = "queryable"  # may have happened: query the outside world before anything
    NON_IDEMPOTENT = "non_idempotent"  # cannot be queried, may repeat: a person decides

    @property
    def tier(self) -> int:
        return _TIERS.index(self)


_TIERS = tuple(SideEffect)


class CriterionResult(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    UNPROVEN = "unproven"  # no checker result, no judge, or no evidence bound to it


class WaitKind(StrEnum):
    """What a task waiting for a person waits for (``display.py`` folds both waits)."""

    DECISION = "decision"
    APPROVAL = "approval"


class PlanAuthor(StrEnum):
    """Who wrote a plan version or a criterion; a person's criterion outlives the model's
    later revisions (``completion.revise_criteria``)."""

    MODEL = "model"
    USER = "user"


class ProbeResult(StrEnum):
    """What a queryable step's read-only probe said about its effect."""

    NOT_PROBED = "not_probed"
    DONE = "done"
    NOT_DONE = "not_done"
    UNKNOWN = "unknown"


class Basis(StrEnum):
    """Why a step may leave ``uncertain`` (or become it): the fact that makes the move safe.

    Every move out of ``uncertain`` names one, and ``rules.UNCERTAIN_EXITS`` says which ones
    each side-effect class accepts; a basis must agree with the step's recorded facts."""

    EVIDENCE = "evidence"  # trusted completion evidence is recorded for the step
    RECEIPT = "receipt"  # the effect's receipt is recorded: it happened
    CLASS_SAFE = "class_safe"  # pure or idempotent: running it again is harmless
    NO_INTENT = "no_intent"  # no intent was recorded, so no effect was ever started
    PROBE_DONE = "probe_done"  # the probe found the effect done
    PROBE_NOT_DONE = "probe_not_done"  # the probe found the effect not done
    USER = "user"  # a person answered the decision about this step
    HOLDER_GONE = "holder_gone"  # the process holding the running step is dead


class DecisionKind(StrEnum):
    """What a question for a person is about; each kind has its own answers
    (``decisions.ANSWERS``)."""

    QUESTION = "question"  # the attempt's own question; the answer is free text
    EFFECT = "effect"  # recovery: did an uncertain step's recorded intent take effect?
    VERIFICATION = "verification"  # the verifier cannot prove every criterion: confirm?
    APPROVAL = "approval"  # a grant of one exact action, scoped to the attempt that asked


class DecisionState(StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    EXPIRED = "expired"  # its attempt ended (an approval) or its task was cancelled


class AttemptOutcome(StrEnum):
    """Why an attempt ended."""

    RUN_ENDED = "run_ended"  # its run ended (or its holder died) before the task settled
    ASKED_USER = "asked_user"  # it asked a person; the answer goes to a new attempt
    VERIFIED = "verified"  # verification settled the task (completed, partial, a question)
    CONTINUES_LATER = "continues_later"  # it asked for its next attempt later (a continuation)
