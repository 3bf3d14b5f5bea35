"""Text commands for chat surfaces without buttons, pure (seed C: "不支持原生按钮的平台 ...
显示明确的回复格式或 /longtask <action> <handle> [version] 文本命令"; docs/long-tasks.md "One
action contract and short handles").

- ``/longtask <action> <handle> [version]``: pause, resume, cancel, continue, approve and
  deny take an optional version (``7`` or ``v7``); ``answer`` takes the answer's words after
  the handle, with the version before them written ``v7`` (a bare number is an answer).
- ``/longtask list`` (or ``ls``): the owner's unfinished tasks and open decisions;
  ``/longtask`` or ``/longtask help``: the format.
- Anything else short (one line, at most ``SHORT_MAX`` characters) is a natural short
  answer: it is taken only when exactly one decision of the owner is open and the reply
  fits that decision (``short_answer``); with several open the service lists them and acts
  on none, never guessing.

Only the parsing and the wording are here; the service resolves the handle, authorizes and
acts through the one action contract (``longtasks/service/actions.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from longtasks.domain.actions import Action, format_handle, parse_handle
from longtasks.domain.decisions import ApprovalAnswer, EffectAnswer, VerificationAnswer
from longtasks.domain.model import Decision
from longtasks.domain.states import DecisionKind

PREFIX = "/longtask"
SHORT_MAX = 64
_VERSION = re.compile(r"[vV]?([1-9][0-9]{0,17})")
_MARKED_VERSION = re.compile(r"[vV]([1-9][0-9]{0,17})")

USAGE = (
    "/longtask <pause|resume|cancel|continue|approve|deny> <#handle> [version]\n"
    "/longtask answer <#handle> [v<version>] <answer>\n"
    "/longtask list"
)


class Kind(StrEnum):
    ACT = "act"  # an action on the task a handle names
    LIST = "list"  # the owner's unfinished tasks and open decisions
    HELP = "help"  # the format
    SHORT = "short"  # a natural short answer to the owner's one open decision
    INVALID = "invalid"  # a /longtask command that does not parse: ``error`` says why


@dataclass(frozen=True, slots=True)
class Parsed:
    kind: Kind
    action: Action | None = None
    handle: int | None = None
    version: int | None = None
    answer: str = ""
    error: str = ""


def _invalid(why: str) -> Parsed:
    return Parsed(Kind.INVALID, error=f"{why}\n{USAGE}")


def parse(text: str) -> Parsed:
    """What a chat message asks for."""
    stripped = text.strip()
    words = stripped.split()
    if not words:
        return _invalid("the message is empty")
    if words[0].lower() != PREFIX:
        if "\n" in stripped or len(stripped) > SHORT_MAX:
            return _invalid("not a /longtask command and too long for a short answer")
        return Parsed(Kind.SHORT, answer=stripped)
    rest = words[1:]
    if not rest or rest[0].lower() == "help":
        return Parsed(Kind.HELP)
    verb = rest[0].lower()
    if verb in ("list", "ls"):
        return Parsed(Kind.LIST) if len(rest) == 1 else _invalid("list takes nothing more")
    if verb not in {a.value for a in Action}:
        return _invalid(f"unknown action {rest[0]!r}")
    action = Action(verb)
    if len(rest) < 2:
        return _invalid(f"{action} needs the task's handle, like #3")
    handle = parse_handle(rest[1])
    if handle is None:
        return _invalid(f"{rest[1]!r} is not a handle; a handle looks like #3")
    tail = rest[2:]
    if action is Action.ANSWER:
        version = None
        if tail and (marked := _MARKED_VERSION.fullmatch(tail[0])):
            version, tail = int(marked.group(1)), tail[1:]
        if not tail:
            return _invalid("answer needs the answer's words after the handle")
        return Parsed(Kind.ACT, action, handle, version, " ".join(tail))
    if not tail:
        return Parsed(Kind.ACT, action, handle)
    plain = _VERSION.fullmatch(tail[0])
    if len(tail) > 1 or plain is None:
        return _invalid(f"{action} takes only a version after the handle, like 7")
    return Parsed(Kind.ACT, action, handle, int(plain.group(1)))


#: Natural short replies each kind of decision takes, and the answer each one gives.
_APPROVAL = {
    **dict.fromkeys(
        ("yes", "y", "ok", "okay", "approve", "approved", "grant", "allow", "同意", "批准"),
        ApprovalAnswer.GRANT.value,
    ),
    **dict.fromkeys(("可以", "好", "是"), ApprovalAnswer.GRANT.value),
    **dict.fromkeys(
        ("no", "n", "deny", "denied", "reject", "refuse", "拒绝", "不", "不行", "否"),
        ApprovalAnswer.DENY.value,
    ),
}
_EFFECT = {
    **dict.fromkeys(("done", "sent", "已发送", "已完成", "完成"), EffectAnswer.DONE.value),
    **dict.fromkeys(("retry", "not sent", "未发送", "重试"), EffectAnswer.RETRY.value),
    **dict.fromkeys(("skip", "跳过"), EffectAnswer.SKIP.value),
    **dict.fromkeys(("fail", "failed", "失败"), EffectAnswer.FAIL.value),
}
_VERIFICATION = {
    **dict.fromkeys(("confirm", "yes", "y", "ok", "确认", "是"), VerificationAnswer.CONFIRM.value),
    **dict.fromkeys(("reject", "no", "n", "否", "不"), VerificationAnswer.REJECT.value),
}
_SHORT: Mapping[DecisionKind, Mapping[str, str]] = {
    DecisionKind.APPROVAL: _APPROVAL,
    DecisionKind.EFFECT: _EFFECT,
    DecisionKind.VERIFICATION: _VERIFICATION,
}
_TRAILING = "。.!\uff01~ "  # trailing full stops and exclamation marks, ASCII and CJK


def short_answer(reply: str, kind: DecisionKind) -> str | None:
    """The answer a natural short reply gives a decision of ``kind`` (None: it does not
    fit, nothing is guessed). A question takes the reply itself."""
    if kind is DecisionKind.QUESTION:
        return reply.strip() or None
    return _SHORT[kind].get(reply.strip().rstrip(_TRAILING).lower())


def action_of(kind: DecisionKind, answer: str) -> Action:
    """The action that gives ``answer`` to a decision of ``kind`` (approvals: approve/deny)."""
    if kind is DecisionKind.APPROVAL:
        return Action.APPROVE if answer == ApprovalAnswer.GRANT else Action.DENY
    return Action.ANSWER


def prompt(handle: int, decision: Decision, version: int) -> str:
    """How a person answers ``decision`` from a chat without buttons: its task's handle and
    the exact command, with the version it was shown at (a later change refuses it)."""
    head = f"{format_handle(handle)} asks ({decision.kind}): {decision.question}"
    if decision.repeat_count > 1:
        head += f" [request {decision.repeat_count} for the same permission]"
    return f"{head}\nReply: {reply_command(handle, decision, version)}"


def reply_command(handle: int, decision: Decision, version: int) -> str:
    """The exact command (or the choice of commands) that answers ``decision``."""
    tag = format_handle(handle)
    if decision.kind is DecisionKind.APPROVAL:
        how = f"/longtask approve {tag} {version} or /longtask deny {tag} {version}"
    elif decision.kind is DecisionKind.QUESTION:
        how = f"/longtask answer {tag} v{version} <your answer>"
    else:
        offered = EffectAnswer if decision.kind is DecisionKind.EFFECT else VerificationAnswer
        how = " or ".join(f"/longtask answer {tag} v{version} {a.value}" for a in offered)
    return how
