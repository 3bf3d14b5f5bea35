"""Who decides whether an ordinary run becomes a long task (docs/long-tasks.md "Activation and
promotion"): a ``Classifier`` the runtime plugs in (a lightweight model preflight in a real
agent), and ``RuleClassifier``, the deterministic default. truerun only says *when* a
classification is due (``PreflightToolCall``: each side-effect tier at most once per run);
the classifier says *what*: ordinary, or promote with a reason and a confidence.

The request also carries the user's per-request override: ``force`` (always a long task,
before any tool runs) or ``suppress`` (never promoted, no preflight at all).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The side-effect tiers, lowest first (pure never needs a preflight).
TIERS = ("pure", "idempotent", "queryable", "non_idempotent")


@dataclass(frozen=True)
class Request:
    """The user's request as the runtime received it."""

    text: str
    force: bool = False  # the user asked for a long task explicitly (a command, a flag)
    suppress: bool = False  # the user asked for none: no preflight, no promotion
    long_task_id: str = ""  # a continuation or recovery entry carrying a task id

    def __post_init__(self) -> None:
        if self.force and self.suppress:
            raise ValueError("a request may force or suppress a long task, not both")


@dataclass(frozen=True)
class ToolCall:
    """A tool call the runtime is about to make, or made (with its receipt, if any)."""

    step_id: str
    title: str
    tier: str  # one of TIERS
    target: str
    summary: str
    idempotency_key: str = ""
    #: what runs it as a long task's step (the step driver's action spec), if declared: a
    #: promotion at this call makes it the task's first remaining step with this action
    action: Mapping[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}, not {self.tier!r}")


@dataclass(frozen=True)
class Classification:
    """A classifier's verdict: ``promote`` or not, why, how sure (0..1)."""

    promote: bool
    reason: str
    confidence: float = 1.0
    goal: str = ""  # the long task's goal (default: the request's text)
    criteria: tuple[str, ...] = field(default=())  # initial acceptance criteria, in words


class Classifier(Protocol):
    def multi_day(self, request: Request) -> bool:
        """The request states cross-session intent (days, later, recurring reports): a long
        task before any tool runs, without a classification."""
        ...

    def classify(
        self, request: Request, call: ToolCall, executed: Sequence[ToolCall]
    ) -> Classification:
        """The preflight at the first tool call of ``call.tier`` in this run."""
        ...


_MULTI_DAY = re.compile(
    r"\b(every (day|morning|week|month)|daily|weekly|monthly|tomorrow|next week|over the next"
    r"|for (several|a few|the next) days|keep (going|working|pushing)|continue later"
    r"|report back|until (it is|it's) done)\b|每天|每周|明天|持续|定期|稍后继续|跨天",
    re.IGNORECASE,
)
_WAITS = re.compile(
    r"\b(wait for|once .* (approves|replies|answers)|approval|approve|sign[- ]off|then|after "
    r"that|and then|followed by)\b|等待|审批|然后",
    re.IGNORECASE,
)


class RuleClassifier:
    """The deterministic default, and the one the tests count: ``calls`` is how many
    classifications it made (``multi_day`` is a rule, not a classification).

    - multi-day intent (``_MULTI_DAY``): promote at once (``multi_day``);
    - at a preflight: a ``non_idempotent`` call in a request with waits or stages
      (``_WAITS``) promotes; a ``queryable`` or ``non_idempotent`` call after two or more
      executed calls promotes (multi-stage work under way); anything else stays ordinary.
    """

    def __init__(self) -> None:
        self.calls = 0

    def multi_day(self, request: Request) -> bool:
        return bool(_MULTI_DAY.search(request.text))

    def classify(
        self, request: Request, call: ToolCall, executed: Sequence[ToolCall]
    ) -> Classification:
        self.calls += 1
        if call.tier == "non_idempotent" and _WAITS.search(request.text):
            return Classification(
                True, "an irreversible effect in a request with waits or stages", 0.9
            )
        if call.tier in ("queryable", "non_idempotent") and len(executed) >= 2:
            return Classification(True, "a risky effect after several executed calls", 0.7)
        return Classification(False, f"a single {call.tier} call in a short request", 0.8)
