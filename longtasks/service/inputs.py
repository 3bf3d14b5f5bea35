"""What callers hand the door (the API and the runtime's step actions map onto these one
to one) and what the door answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from longtasks.domain.completion import Source
from longtasks.domain.model import Decision, PlanStep, StepDraft, Task
from longtasks.domain.states import CriterionResult, PlanAuthor


@dataclass(frozen=True, slots=True)
class NewCriterion:
    criterion_id: str
    text: str
    checker_kind: str | None = None  # None: subjective (a judge or a person decides)
    checker_spec: str = "{}"  # JSON parameters of the checker
    required: bool = True


@dataclass(frozen=True, slots=True)
class NewTask:
    """A long task as a person (or a model's preflight) asks for it."""

    project_id: str
    owner_id: str
    goal: str
    steps: tuple[StepDraft, ...]
    criteria: tuple[NewCriterion, ...]
    constraints: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()  # optional source references (chat, session, document)
    source_ref: str = ""  # where it was asked for (a chat thread's URL): notices name it
    agent_id: str | None = None
    task_id: str | None = None  # None: a new id
    author: PlanAuthor = PlanAuthor.USER  # who wrote the first plan and criteria
    reason: str = "created"
    max_attempts: int = 20
    max_tokens: int | None = None
    lifetime_ms: int | None = None
    max_corrections: int = 2
    max_verify_interruptions: int = 3


@dataclass(frozen=True, slots=True)
class Intent:
    """Before an effect: what will be done to what, as a person can check it."""

    target: str
    summary: str
    idempotency_key: str | None = None  # None: the step's own key


@dataclass(frozen=True, slots=True)
class ReceiptIn:
    """After the effect: what the outside world answered."""

    target: str
    at_ms: int
    summary: str
    external_id: str | None = None
    detail: str = "{}"  # JSON, display only


@dataclass(frozen=True, slots=True)
class NewEvidence:
    """A safe reference to evidence kept elsewhere, with a summary that renders alone."""

    kind: str
    reference: str
    summary: str
    render: str = "{}"  # JSON: title, size, time, content hash
    effect_id: str | None = None  # the side effect whose receipt it cites


@dataclass(frozen=True, slots=True)
class VerdictIn:
    """A checker's, a judge's or a person's verdict on one criterion, with the evidence it
    produced (bound to that criterion) and the ids of stored evidence it cites (which count
    only if they are bound to that criterion)."""

    criterion_id: str
    source: Source
    result: CriterionResult
    evidence: tuple[NewEvidence, ...] = ()
    cited: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Changed:
    """The door's answer: the task after the change (``task.state_version`` is the new
    etag), the step acted on, and what the change created."""

    task: Task
    step: PlanStep | None = None
    decision: Decision | None = None
    made: str | None = None  # the id of the side effect, evidence or attempt it created
    run_id: str | None = None  # start_attempt: the attempt's run
    notes: tuple[str, ...] = field(default=())  # what a person should know (kept criteria)
