"""The domain's refusals as the API's errors: every ``Refused`` the pure rules answer leaves
the door as a ``kernel.errors`` error with a stable reason, the rule's own name in the
metadata (``refusal``), and nothing written."""

from __future__ import annotations

from kernel.errors import (
    DomainError,
    InvalidArgument,
    InvalidLongTaskTransition,
    InvalidStepTransition,
    LongTaskExists,
    LongTaskNotFound,
)
from longtasks.domain.rules import Refusal, Refused

#: Refusals about what the caller sent rather than about the state.
_ARGUMENT = frozenset({Refusal.INVALID_PLAN, Refusal.ANSWER_NOT_OFFERED})


def task_error(refused: Refused, task_id: str) -> DomainError:
    """A refusal of a task command (``decide_task``, a decision's answer, a plan)."""
    meta = {"task_id": task_id, "refusal": refused.reason.value}
    if refused.reason is Refusal.TASK_NOT_FOUND:
        return LongTaskNotFound(refused.message, **meta)
    if refused.reason is Refusal.TASK_EXISTS:
        return LongTaskExists(refused.message, **meta)
    if refused.reason in _ARGUMENT:
        return InvalidArgument(refused.message, **meta)
    return InvalidLongTaskTransition(refused.message, **meta)


def step_error(refused: Refused, task_id: str, step_id: str) -> DomainError:
    """A refusal of a step action (``decide_step``, ``verification_refusal``)."""
    meta = {"task_id": task_id, "step_id": step_id, "refusal": refused.reason.value}
    return InvalidStepTransition(refused.message, **meta)
