"""Notices, pure (seed C "顶栏徽章与系统通知": the person is not watching a long task, so
entering ``waiting_for_user``, ``waiting_for_approval`` or ``recovery_required``, and
finishing as ``completed``, ``partial`` or ``failed``, must reach them; docs/long-tasks.md
"Notices").

One committed change of a task yields zero or one notice (``notice_for``), written into the
outbox in the same transaction; its dedupe key is unique in the table, so a second writer of
the same fact (the watcher's ``attempt_ended`` and process start's ``held_by_the_dead`` both
seeing one dead attempt) writes nothing:

- the attempt holding the lease ended without the task settling (its run ended, was lost,
  or its process is not alive): ``interruption``, keyed by task and attempt, whatever the
  task moved to (``recovery_required``, ``queued`` again, ``waiting_for_user`` with the
  effect question folded into the same notice, or ``verifying`` again);
- a decision or an approval was opened: ``decision`` / ``approval``, keyed by the decision,
  carrying the prompt a chat without buttons answers with (``text_commands.prompt``: the
  handle, "[request N for the same permission]", the exact command);
- the task finished ``completed``, ``partial`` or ``failed``: ``terminal``, keyed by task
  and plan version (a continued task finishes its next version with a notice of its own).

Nothing else is a notice: entering ``queued`` (a start, a resume), ``running``, a pause or a
person's cancel (they did it themselves).

The run layer writes no notices at all: a run's ``lost`` or ``unknown`` stays a run event,
and for a run an attempt of a long task owns, the run layer's record is only the trigger of
the watcher's ``attempt_ended``: the long task's notice is the one user-visible expression
(seed C: "队列行降级为纯触发器").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from longtasks.domain.actions import format_handle
from longtasks.domain.model import Decision
from longtasks.domain.states import DecisionKind, TaskState
from longtasks.domain.text_commands import prompt, reply_command


class NoticeKind(StrEnum):
    INTERRUPTION = "interruption"
    DECISION = "decision"
    APPROVAL = "approval"
    TERMINAL = "terminal"


#: The terminal states a person is told about (a cancel is their own doing).
NOTICED_ENDINGS = frozenset({TaskState.COMPLETED, TaskState.PARTIAL, TaskState.FAILED})

_AFTER_INTERRUPTION = {
    TaskState.RECOVERY_REQUIRED: "it needs your review before it goes on",
    TaskState.QUEUED: "it resumes by itself from the first step not proven done",
    TaskState.WAITING_FOR_USER: "it waits for your answer",
    TaskState.VERIFYING: "its verification runs again in full",
}


@dataclass(frozen=True, slots=True)
class ChangeFacts:
    """What one committed change of a task did, as the notice rule reads it."""

    task_id: str
    handle: int
    goal: str
    before: TaskState
    after: TaskState
    plan_version: int
    version: int  # the task's etag after the change (what an answer must send)
    reason: str = ""  # the task's state reason after the change
    interrupted_attempt: str | None = None  # the lease holder this change buried
    asked: Sequence[Decision] = ()  # the decisions this change opened


@dataclass(frozen=True, slots=True)
class Notice:
    kind: NoticeKind
    dedupe_key: str
    title: str
    text: str
    decision_id: str | None = None
    command: str = ""  # the exact command that answers it; empty: nothing to answer


def _short(goal: str) -> str:
    line = goal.strip().splitlines()[0] if goal.strip() else ""
    return line if len(line) <= 80 else line[:79] + "…"


def notice_for(facts: ChangeFacts) -> Notice | None:
    """The one notice a committed change raises, if any (the module's docstring)."""
    tag = format_handle(facts.handle)
    name = f"{tag} {_short(facts.goal)}".rstrip()
    asked = facts.asked[0] if facts.asked else None
    if facts.interrupted_attempt is not None:
        then = _AFTER_INTERRUPTION.get(facts.after, f"it is {facts.after} now")
        text = f"{name} was interrupted: {facts.reason or 'its attempt ended'}. {then}."
        if asked is not None:
            text += "\n" + prompt(facts.handle, asked, facts.version)
        elif facts.after is TaskState.RECOVERY_REQUIRED:
            text += (
                f"\nCheck it, then clear its recovery at version {facts.version} "
                f"(ClearRecovery), or reply: /longtask cancel {tag} {facts.version}"
            )
        return Notice(
            NoticeKind.INTERRUPTION,
            f"interruption:{facts.task_id}:{facts.interrupted_attempt}",
            f"{tag} was interrupted",
            text,
            asked.id if asked is not None else None,
            reply_command(facts.handle, asked, facts.version) if asked is not None else "",
        )
    if asked is not None:
        approval = asked.kind is DecisionKind.APPROVAL
        kind = NoticeKind.APPROVAL if approval else NoticeKind.DECISION
        title = f"{tag} asks for your approval" if approval else f"{tag} asks you"
        if approval and asked.repeat_count > 1:
            title += f" ({ordinal(asked.repeat_count)} request for the same permission)"
        return Notice(
            kind,
            f"decision:{asked.id}",
            title,
            f"{name}\n{prompt(facts.handle, asked, facts.version)}",
            asked.id,
            reply_command(facts.handle, asked, facts.version),
        )
    if facts.after in NOTICED_ENDINGS and facts.before is not facts.after:
        return Notice(
            NoticeKind.TERMINAL,
            f"terminal:{facts.task_id}:{facts.plan_version}",
            f"{tag} {facts.after}",
            f"{name} is {facts.after}: {facts.reason or facts.after}.",
        )
    return None


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, ..."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


#: The longest wait between two tries of one delivery.
MAX_BACKOFF_MS = 60 * 60 * 1000


def retry_after_ms(tries: int, base_ms: int, cap_ms: int = MAX_BACKOFF_MS) -> int:
    """How long a delivery waits after its ``tries``-th failed try: ``base_ms`` doubled for
    every try before it, at most ``cap_ms`` (exponential backoff)."""
    if tries < 1:
        return 0
    return int(min(cap_ms, max(1, base_ms) * 2 ** min(tries - 1, 40)))


def after_failure(tries: int, max_tries: int) -> str:
    """A delivery's state after its ``tries``-th try failed: ``dead`` (the dead letter)
    once it had ``max_tries`` of them, else ``pending`` (tried again)."""
    return "dead" if tries >= max(1, max_tries) else "pending"
