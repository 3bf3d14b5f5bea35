"""A person's resolution of ``recovery_required`` (seed C "macOS 桌面端展示" B: 已发送, 跳过 /
未发送, 重试 / 我先去确认), pure.

``recovery_required`` is reached two ways (``recovery.py``): a step failed (the plan stops
there), or verification was interrupted too often. The person who looked says one of:

- ``go_on`` ("Checked, go on"): nothing about the step; the task is queued again as it is.
- ``skip`` ("Done, skip"): the stopped step's work is done. It becomes ``skipped`` on the
  basis ``user``: recorded as a person's word, never as runtime evidence, so it is no useful
  result either (``boundary.py``). Refused (``NO_STOPPED_STEP``) when no step stopped it.
- ``retry`` ("Not done, retry"): the stopped step goes back to ``pending`` (``reopen``, a
  fresh try on the basis ``user``) and the task is queued again; with no stopped step (an
  interrupted verification) it is checked again, as ``go_on``.

"I'll check" is no resolution: the task stays where it is. Each resolution also names
``recovery_cleared`` for the task (recovery_required -> queued).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from longtasks.domain.model import Step
from longtasks.domain.rules import Refusal, Refused, StepCommand
from longtasks.domain.states import StepState


class Resolution(StrEnum):
    GO_ON = "go_on"
    SKIP = "skip"
    RETRY = "retry"


#: The step move each resolution makes on the stopped step (None: none).
RESOLUTION_MOVES: dict[Resolution, StepCommand | None] = {
    Resolution.GO_ON: None,
    Resolution.SKIP: StepCommand.SKIP,
    Resolution.RETRY: StepCommand.REOPEN,
}


@dataclass(frozen=True, slots=True)
class Resolved:
    step_index: int | None  # the stopped step moved (None: no step moves)
    command: StepCommand | None
    why: str


def stopped_step(steps: Sequence[Step]) -> Step | None:
    """The step recovery stopped at: the first failed one (``resume_point``), if any."""
    return next((s for s in steps if s.state is StepState.FAILED), None)


def resolve_recovery(steps: Sequence[Step], resolution: Resolution) -> Resolved | Refused:
    """What ``resolution`` does to the steps of a task in ``recovery_required``."""
    stopped = stopped_step(steps)
    command = RESOLUTION_MOVES[resolution]
    if command is None:
        return Resolved(None, None, "checked by a person: it goes on as it is")
    if stopped is None:
        if resolution is Resolution.RETRY:
            return Resolved(None, None, "no step stopped it: the criteria are checked again")
        why = "no step stopped it (verification was interrupted): nothing to skip"
        return Refused(Refusal.NO_STOPPED_STEP, why)
    if resolution is Resolution.SKIP:
        why = f"step {stopped.index}: a person says its work is done; skipped on their word"
    else:
        why = f"step {stopped.index}: a person says its work is not done; it runs again"
    return Resolved(stopped.index, command, why)


def offered(steps: Sequence[Step]) -> tuple[Resolution, ...]:
    """What a surface offers a person on ``recovery_required``, besides going on as it is
    and cancelling: skip and retry with a stopped step, else retry (check again)."""
    if stopped_step(steps) is None:
        return (Resolution.RETRY,)
    return (Resolution.SKIP, Resolution.RETRY)
