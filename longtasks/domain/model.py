"""The long task's records as plain values: what the pure rules read (``Step``) and what the
store keeps (``Task``, ``PlanVersion``, ``PlanStep``, ``CriterionRecord``, ``Effect``,
``Evidence``, ``Decision``, ``Attempt``, ``Event``). No I/O; the store maps rows to these
and back (longtasks/store/rows.py), reading every state field from a column.

Display payloads (a receipt's detail, a probe's or checker's parameters, a decision's
options and material) are carried as the stored JSON text, unparsed: nothing here reads
them, so no state ever depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from longtasks.domain.completion import Criterion, EvidenceRef
from longtasks.domain.states import (
    AttemptOutcome,
    Basis,
    CriterionResult,
    DecisionKind,
    DecisionState,
    PlanAuthor,
    ProbeResult,
    SideEffect,
    StepState,
    TaskState,
)


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a plan version, as far as the rules need it.

    ``intent_id``, ``receipt_id`` and ``probe`` belong to the current try: beginning a step
    again starts a new try with none of them (``StepMoved.fresh_try``). ``evidence`` holds
    references to trusted completion evidence bound to this step."""

    index: int
    state: StepState
    side_effect: SideEffect
    intent_id: str | None = None
    receipt_id: str | None = None
    evidence: tuple[str, ...] = ()
    probe: ProbeResult = ProbeResult.NOT_PROBED
    holder: str | None = None  # the attempt that holds it while it is running

    @property
    def intent(self) -> bool:
        return self.intent_id is not None

    @property
    def receipt(self) -> bool:
        return self.receipt_id is not None

    @property
    def open_intent(self) -> bool:
        """An intent without its receipt: the effect may have happened, or may not."""
        return self.intent and not self.receipt


@dataclass(frozen=True, slots=True)
class Lease:
    """The attempt that may act on the task's steps, its run, and until when."""

    attempt_id: str
    run_id: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class Budget:
    """The task-level budget (seed "预算、并发与配额"): attempts, tokens, lifetime."""

    max_attempts: int
    attempts_used: int = 0
    max_tokens: int | None = None
    tokens_used: int = 0
    deadline_ms: int | None = None

    def exhausted(self, now_ms: int) -> str | None:
        """Why no further attempt may start (None: the budget allows one)."""
        if self.attempts_used >= self.max_attempts:
            return f"the task's budget of {self.max_attempts} attempts is used up"
        tokens = self.tokens_exhausted()
        if tokens is not None:
            return tokens
        if self.deadline_ms is not None and now_ms >= self.deadline_ms:
            return "the task's lifetime is over"
        return None

    def tokens_exhausted(self) -> str | None:
        """Why the running attempt must stop for its tokens (None: some are left). Checked
        on every usage report; the attempt count and lifetime gate only a new attempt."""
        if self.max_tokens is not None and self.tokens_used >= self.max_tokens:
            return (
                f"the task's budget of {self.max_tokens:,} tokens is used up "
                f"({self.tokens_used:,} used)"
            )
        return None


@dataclass(frozen=True, slots=True)
class Task:
    """A long task's state-machine fields (the ``long_tasks`` row without its display
    payloads). ``state_version`` is the etag every mutation compares."""

    id: str
    project_id: str
    owner_id: str
    goal: str
    state: TaskState
    state_version: int
    plan_version: int
    budget: Budget
    agent_id: str | None = None
    state_reason: str = ""
    lease: Lease | None = None
    verify_interruptions: int = 0  # on the current plan version
    max_verify_interruptions: int = 3
    corrections_used: int = 0  # verify-correct-verify rounds on the current plan version
    max_corrections: int = 2
    event_sequence: int = 0
    created_by: str = ""
    created_at_ms: int = 0
    updated_at_ms: int = 0
    finished_at_ms: int | None = None
    handle: int = 0  # the owner's short handle (``#3``), given at creation, never changed
    source_run_id: str | None = None  # the run it was promoted from (its first attempt's)
    source_ref: str = ""  # where its creator asked for it (a chat thread's URL), if given


@dataclass(frozen=True, slots=True)
class PlanVersion:
    task_id: str
    version: int
    author: PlanAuthor
    reason: str
    created_by: str
    created_at_ms: int
    closed_state: TaskState | None = None  # the task's state when a newer version replaced it
    closed_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class StepDraft:
    """A step as a plan proposes it (creation, revision, continuation)."""

    step_id: str
    title: str
    side_effect: SideEffect
    idempotency_key: str | None = None
    probe_spec: str = "{}"  # JSON, for the runtime's read-only probe (queryable steps)
    input_summary: str = ""
    action_spec: str = "{}"  # JSON, what the runtime runs (a declared command, its receipt)


@dataclass(frozen=True, slots=True)
class PlanStep:
    """A step of one plan version with its state and its current try's record. ``version``
    is the step's etag; ``position`` counts from 1."""

    task_id: str
    plan_version: int
    step_id: str
    position: int
    title: str
    side_effect: SideEffect
    state: StepState
    version: int
    introduced_in: int
    attempt_count: int = 0
    holder: str | None = None
    intent_id: str | None = None
    receipt_id: str | None = None
    probe: ProbeResult = ProbeResult.NOT_PROBED
    basis: Basis | None = None
    granted_by: str | None = None  # an answered decision allowing the next retry
    idempotency_key: str | None = None
    probe_spec: str = "{}"
    input_summary: str = ""
    action_spec: str = "{}"
    updated_at_ms: int = 0

    def rules(self, evidence: tuple[str, ...] = ()) -> Step:
        """The facts the pure rules read, with the ids of the evidence bound to it."""
        return Step(
            self.position,
            self.state,
            self.side_effect,
            self.intent_id,
            self.receipt_id,
            evidence,
            self.probe,
            self.holder,
        )

    def draft(self) -> StepDraft:
        return StepDraft(
            self.step_id,
            self.title,
            self.side_effect,
            self.idempotency_key,
            self.probe_spec,
            self.input_summary,
            self.action_spec,
        )


@dataclass(frozen=True, slots=True)
class CriterionRecord:
    """A criterion of one plan version, with its latest result."""

    criterion: Criterion
    position: int
    checker_spec: str = "{}"  # JSON parameters of its checker
    result: CriterionResult = CriterionResult.UNPROVEN
    result_source: str | None = None
    result_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Receipt:
    """What the outside world answered, as a person can check it."""

    external_id: str | None
    target: str
    at_ms: int  # the outside world's timestamp
    summary: str
    detail: str = "{}"  # JSON, display only
    recorded_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class Effect:
    """One try's side effect: the intent, written before the effect, and its receipt."""

    id: str
    task_id: str
    step_id: str
    plan_version: int
    attempt_id: str
    try_no: int
    target: str
    summary: str
    idempotency_key: str | None
    recorded_at_ms: int
    receipt: Receipt | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """A safe reference to evidence kept elsewhere, bound to one step or one criterion."""

    id: str
    task_id: str
    kind: str
    reference: str
    summary: str
    step_id: str | None = None
    criterion_id: str | None = None
    render: str = "{}"  # JSON render summary (title, size, time, hash), display only
    effect_id: str | None = None
    attempt_id: str | None = None
    created_at_ms: int = 0
    #: the target is gone (expired or cleaned): the summary still renders, reads say so
    unavailable_reason: str | None = None

    def ref(self) -> EvidenceRef:
        """The reference the completion rules read: it proves only its own criterion."""
        return EvidenceRef(self.id, self.criterion_id or "")


@dataclass(frozen=True, slots=True)
class Decision:
    id: str
    task_id: str
    kind: DecisionKind
    state: DecisionState
    question: str
    plan_version: int
    task_version: int  # the task's etag when it was asked
    created_at_ms: int
    options: str = "[]"  # JSON, display only
    material: str = "{}"  # JSON, display only (an effect's intent record)
    subject: str = ""  # an approval's exact action; repeats are counted by it
    step_id: str | None = None
    attempt_id: str | None = None
    repeat_count: int = 1
    answer: str | None = None
    note: str = ""
    answered_by: str | None = None
    answered_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    id: str
    task_id: str
    attempt_no: int
    run_id: str
    plan_version: int
    started_at_ms: int
    ended_at_ms: int | None = None
    outcome: AttemptOutcome | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a task's append-only log."""

    type: str
    message: str
    plan_version: int
    step_id: str | None = None
    attempt_id: str | None = None
    decision_id: str | None = None
    from_state: str | None = None
    to_state: str | None = None
    sequence: int = 0  # numbered when appended
    actor_type: str = ""
    actor_id: str = ""
    created_at_ms: int = 0
