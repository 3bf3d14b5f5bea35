"""Where a task ends when it reaches a boundary (seed C "状态模型"), pure.

A boundary is reached when a budget runs out (tokens, attempts or lifetime: ``usage.py``,
``start_attempt``) or the correction loop is used up with required criteria still unmet
(``record_verification``). Both endings are terminal; which one is decided by one fact:

- ``partial``: "已产生有用结果, 但存在未满足的必需验收条件". A *useful result* is at least one
  step ``completed`` (completing needs evidence, a receipt or a person's answer, so it never
  happens on the model's word alone) or at least one criterion ``passed`` (passed counts
  only with evidence bound to it, ``completion.py``). A ``skipped`` step is no result: it
  did nothing.
- ``failed``: "已达到失败边界, 且不存在安全、有效的继续路径": nothing useful exists.

The reason words are the same in both; only the state differs.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from longtasks.domain.rules import TaskCommand
from longtasks.domain.states import CriterionResult, StepState


class Boundary(StrEnum):
    BUDGET = "budget"  # tokens, attempts or lifetime used up
    CORRECTIONS = "corrections"  # required criteria unmet and no correction round left


#: The command each boundary names when a useful result exists (-> partial).
_PARTIAL: dict[Boundary, TaskCommand] = {
    Boundary.BUDGET: TaskCommand.BUDGET_EXHAUSTED,
    Boundary.CORRECTIONS: TaskCommand.VERIFICATION_INCOMPLETE,
}


def useful_result(steps: Iterable[StepState], criteria: Iterable[CriterionResult]) -> bool:
    """A step completed (with its evidence) or a criterion passed (with bound evidence)."""
    return any(s is StepState.COMPLETED for s in steps) or any(
        c is CriterionResult.PASSED for c in criteria
    )


def boundary_command(
    boundary: Boundary, steps: Iterable[StepState], criteria: Iterable[CriterionResult]
) -> TaskCommand:
    """``partial`` (the boundary's own command) with a useful result, else ``fail``."""
    if useful_result(steps, criteria):
        return _PARTIAL[boundary]
    return TaskCommand.FAIL
