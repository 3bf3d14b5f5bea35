"""What every surface shows for a long task: the one projection of the task state.

The state machine keeps all twelve states; only here are two pairs folded (seed C
"状态模型"): running and verifying show as ``in_progress``, and waiting_for_user and
waiting_for_approval as ``waiting_for_you`` with the wait kind telling them apart. No
other module may fold states, so no two surfaces can disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from longtasks.domain.states import TaskState, WaitKind

T = TaskState


class Shown(StrEnum):
    PLANNED = "planned"
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    WAITING_FOR_YOU = "waiting_for_you"
    PAUSED = "paused"
    RECOVERY_REQUIRED = "recovery_required"
    PARTIAL = "partial"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Display:
    shown: Shown
    wait_kind: WaitKind | None  # set exactly when shown is waiting_for_you
    label: str  # why it stands still, or what it does: stillness is always explained
    action: str  # the main action a surface offers


#: The folding, one row per task state.
FOLDING: Mapping[TaskState, Display] = {
    T.PLANNED: Display(Shown.PLANNED, None, "planned, not started", "start"),
    T.QUEUED: Display(Shown.QUEUED, None, "queued: waiting for a free slot", "pause"),
    T.RUNNING: Display(Shown.IN_PROGRESS, None, "working on its steps", "pause"),
    T.VERIFYING: Display(Shown.IN_PROGRESS, None, "checking the acceptance criteria", "pause"),
    T.WAITING_FOR_USER: Display(
        Shown.WAITING_FOR_YOU, WaitKind.DECISION, "needs your decision", "answer"
    ),
    T.WAITING_FOR_APPROVAL: Display(
        Shown.WAITING_FOR_YOU, WaitKind.APPROVAL, "waiting for your approval", "review_approval"
    ),
    T.PAUSED: Display(Shown.PAUSED, None, "paused by you; it will not go on by itself", "resume"),
    T.RECOVERY_REQUIRED: Display(
        Shown.RECOVERY_REQUIRED, None, "interrupted: needs a check before it goes on", "review"
    ),
    T.PARTIAL: Display(Shown.PARTIAL, None, "partly done: required criteria unmet", "view_unmet"),
    T.COMPLETED: Display(Shown.COMPLETED, None, "done: every required criterion proven", "view"),
    T.FAILED: Display(Shown.FAILED, None, "failed: no safe way on", "view_report"),
    T.CANCELLED: Display(Shown.CANCELLED, None, "cancelled by you", "view"),
}


def display(state: TaskState, *, ahead: int | None = None, waiting: str | None = None) -> Display:
    """The display of a task in ``state``; ``ahead``: for a queued task, how many of its
    owner's tasks are before it; ``waiting``: for a queued task its continuation holds,
    what it waits for (``continuations.waiting_text``: "waiting for its next window at
    09:00 (truerun must be running)"), so it never reads as waiting for a slot."""
    shown = FOLDING[state]
    if state is T.QUEUED and waiting is not None:
        return replace(shown, label=waiting)
    if state is T.QUEUED and ahead is not None:
        return replace(shown, label=f"queued: {ahead} ahead of it")
    return shown
