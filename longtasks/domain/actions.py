"""The one action contract, pure (docs/long-tasks.md "One action contract and short
handles"; seed C, the channels' shared contract): the actions a person may take on a task
from any surface, short handles, the record an action leaves, and which open decision an
answer goes to. No I/O: the service (``longtasks/service/actions.py``) resolves, authorizes
and carries an action out through the door's own methods.

- A **handle** is ``#<n>``: the owner's tasks are numbered from 1 in creation order and a
  number is never given twice to one owner, so a handle is unique and stable for as long
  as the task lives, and a handle in an old message can only ever name the task it named.
- An **action** carries a one-time id chosen by the client; the door keeps it with the
  change it made, in the same transaction, so a repeated id never acts twice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from longtasks.domain.decisions import ApprovalAnswer
from longtasks.domain.model import Decision
from longtasks.domain.states import DecisionKind, DecisionState

_HANDLE = re.compile(r"#?([1-9][0-9]{0,8})")
#: A client-chosen action id: short, printable, no spaces (a chat message id, a UUID).
_ACTION_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


class Action(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    CONTINUE = "continue"  # go on with a finished task (a new plan version, a new attempt)
    ANSWER = "answer"  # any answer the decision's kind takes
    APPROVE = "approve"  # an approval's ``grant``
    DENY = "deny"  # an approval's ``deny``

    @property
    def answers(self) -> bool:
        """It answers a decision (and so needs one)."""
        return self in (Action.ANSWER, Action.APPROVE, Action.DENY)


class Outcome(StrEnum):
    DONE = "done"  # this request made the change
    ALREADY_DONE = "already_done"  # an earlier request with the same action id made it


def format_handle(number: int) -> str:
    return f"#{number}"


def parse_handle(text: str) -> int | None:
    """``#3`` (or ``3``) -> 3; anything else -> None."""
    match = _HANDLE.fullmatch(text.strip())
    return int(match.group(1)) if match else None


def valid_action_id(text: str) -> bool:
    return _ACTION_ID.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """An action as the door keeps it: what was asked (the first four fields are the
    request a repeat must match) and the task version the change made."""

    task_id: str
    action_id: str
    action: Action
    decision_id: str | None = None
    answer: str | None = None
    actor_type: str = ""
    actor_id: str = ""
    task_version: int = 0
    created_at_ms: int = 0

    def same_request(self, other: ActionRecord) -> bool:
        """Whether ``other`` asks for what this one did (a repeat, not a reused id)."""
        return (self.task_id, self.action_id, self.action, self.answer) == (
            other.task_id,
            other.action_id,
            other.action,
            other.answer,
        ) and (other.decision_id is None or other.decision_id == self.decision_id)


def answer_of(action: Action, given: str) -> str:
    """The answer an action gives: approve and deny are an approval's fixed answers."""
    if action is Action.APPROVE:
        return ApprovalAnswer.GRANT.value
    if action is Action.DENY:
        return ApprovalAnswer.DENY.value
    return given.strip()


@dataclass(frozen=True, slots=True)
class Choice:
    """Which open decision an answering action goes to; ``why`` when none can be chosen."""

    decision: Decision | None
    why: str = ""
    ambiguous: bool = False  # several are open: the caller must name one


def choose_decision(action: Action, decisions: Sequence[Decision], wanted: str) -> Choice:
    """The decision ``action`` answers: ``wanted`` (a decision id) when given, else the one
    open decision of the task, never a guess among several. Approve and deny answer
    approvals only."""
    open_ = [d for d in decisions if d.state is DecisionState.OPEN]
    if action in (Action.APPROVE, Action.DENY):
        open_ = [d for d in open_ if d.kind is DecisionKind.APPROVAL]
    if wanted:
        for decision in open_:
            if decision.id == wanted:
                return Choice(decision)
        return Choice(None, f"decision {wanted} is not open for {action}")
    if len(open_) == 1:
        return Choice(open_[0])
    what = "approval" if action in (Action.APPROVE, Action.DENY) else "decision"
    if not open_:
        return Choice(None, f"the task has no open {what}")
    ids = ", ".join(d.id for d in open_)
    return Choice(None, f"the task has {len(open_)} open {what}s ({ids}): name one", True)
