"""An ordinary run's declared tool calls (a run spec's ``tools`` section; docs/
runtime-protocol.md "Declared tool calls"), read without I/O. The reference agent refuses a
Start whose section does not parse (``SpecError``), and hands it to the tool runner
(``tools.py``) in ``TRUERUN_TOOLS`` as JSON.

    {"tools": {
       "text": "Update the release page, then announce it",   # the user's request
       "force": false, "suppress": false,                     # the per-request override
       "calls": [                                             # run in order
         {"id": "edit", "title": "edit the page", "tier": "idempotent",
          "run": "<shell>", "receipt": "json" | "none", "target": "..", "writes": "..",
          "idempotency_key": ".."},
         ...],
       "plan": [ <a step as the step driver takes it: id, title, tier, and an action:
                  run/receipt/writes/target/approval/prepare | ask/options | continue> ],
       "criteria": [{"id": "c1", "text": "..", "checker_kind": "..", "checker": {..}}]}}

``tier`` is a side-effect class (pure, idempotent, queryable, non_idempotent). ``plan`` is
the work the model sees beyond this run's calls (it is proposed after them; two or more
stages, or one that waits, make the run a long task). ``criteria`` are the long task's if
the run becomes one; by default each step must be completed (``step_completed``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .actions import ActionError, parse_action
from .classifier import TIERS, Request, ToolCall

TOOLS = "tools"
TOOLS_ENV = "TRUERUN_TOOLS"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SECTION_KEYS = {"text", "force", "suppress", "calls", "plan", "criteria"}
_STEP_KEYS = {"id", "title", "tier", "idempotency_key"}
_CALL_ACTION_KEYS = {"run", "receipt", "target", "writes"}
_PLAN_ACTION_KEYS = {*_CALL_ACTION_KEYS, "approval", "prepare", "ask", "options", "continue"}
_CRITERION_KEYS = {"id", "text", "checker_kind", "checker"}


class ToolSpecError(ValueError):
    """The ``tools`` section cannot be run as declared (nothing ran)."""


@dataclass(frozen=True)
class DeclaredStep:
    """A declared call or plan step: a step id, a tier, and its step-driver action."""

    step_id: str
    title: str
    tier: str
    action: dict[str, Any]
    idempotency_key: str = ""

    @property
    def waits(self) -> bool:
        """It waits for a person or a time (a question, an approval, a continuation)."""
        return bool({"ask", "approval", "continue"} & set(self.action))

    def call(self) -> ToolCall:
        target = self.action.get("target") or self.action.get("writes") or self.title
        summary = str(self.action.get("run") or self.action.get("ask") or "continue later")
        return ToolCall(
            self.step_id,
            self.title,
            self.tier,
            target,
            summary[:500],
            self.idempotency_key,
            action=self.action,
        )


@dataclass(frozen=True)
class Criterion:
    criterion_id: str
    text: str
    checker_kind: str = ""
    checker: dict[str, Any] | None = None


@dataclass(frozen=True)
class ToolsSpec:
    request: Request
    calls: tuple[DeclaredStep, ...]
    plan: tuple[DeclaredStep, ...] = ()
    criteria: tuple[Criterion, ...] = ()

    @property
    def steps(self) -> tuple[DeclaredStep, ...]:
        return (*self.calls, *self.plan)


def parse_tools(section: Any) -> ToolsSpec:
    """The section, checked; a ToolSpecError names what is wrong."""
    if not isinstance(section, dict):
        raise ToolSpecError("tools must be an object")
    _no_unknown(section, _SECTION_KEYS, "tools")
    text = section.get("text", "")
    force, suppress = section.get("force", False), section.get("suppress", False)
    if not isinstance(text, str) or not text.strip():
        raise ToolSpecError("tools.text must be the user's request (a non-empty string)")
    if not isinstance(force, bool) or not isinstance(suppress, bool):
        raise ToolSpecError("tools.force and tools.suppress must be true or false")
    if force and suppress:
        raise ToolSpecError("a request may force or suppress a long task, not both")
    calls = tuple(_step(x, f"tools.calls[{n}]", True) for n, x in _numbered(section, "calls"))
    plan = tuple(_step(x, f"tools.plan[{n}]", False) for n, x in _numbered(section, "plan"))
    if force and not (calls or plan):
        raise ToolSpecError("a forced long task needs a call or a plan step to do")
    ids = [s.step_id for s in (*calls, *plan)]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ToolSpecError(f"step ids must be unique: {', '.join(twice)}")
    criteria = tuple(_criterion(x, n) for n, x in enumerate(_list(section, "criteria"))) or tuple(
        Criterion(f"c-{s.step_id}", f"{s.title} is done", "step_completed", {"step_id": s.step_id})
        for s in (*calls, *plan)
    )
    return ToolsSpec(Request(text, force=force, suppress=suppress), calls, plan, criteria)


def _numbered(section: dict[str, Any], name: str) -> list[tuple[int, Any]]:
    return list(enumerate(_list(section, name)))


def _list(section: dict[str, Any], name: str) -> list[Any]:
    value = section.get(name) or []
    if not isinstance(value, list):
        raise ToolSpecError(f"tools.{name} must be a list")
    return value


def _no_unknown(value: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(value) - known)
    if unknown:
        raise ToolSpecError(f"{where} has unknown keys: {', '.join(unknown)}")


def _step(value: Any, where: str, is_call: bool) -> DeclaredStep:
    if not isinstance(value, dict):
        raise ToolSpecError(f"{where} must be an object")
    _no_unknown(value, _STEP_KEYS | (_CALL_ACTION_KEYS if is_call else _PLAN_ACTION_KEYS), where)
    step_id, title = value.get("id"), value.get("title", value.get("id"))
    if not isinstance(step_id, str) or not _ID.match(step_id):
        raise ToolSpecError(f"{where}.id must be a step id (letters, digits, . _ -)")
    if not isinstance(title, str) or not title.strip():
        raise ToolSpecError(f"{where}.title must be a non-empty string")
    tier = value.get("tier", None if is_call else "pure")
    if tier not in TIERS:
        raise ToolSpecError(f"{where}.tier must be one of {', '.join(TIERS)}, not {tier!r}")
    key = value.get("idempotency_key", "")
    if not isinstance(key, str):
        raise ToolSpecError(f"{where}.idempotency_key must be a string")
    action = {k: v for k, v in value.items() if k not in _STEP_KEYS}
    try:
        parsed = parse_action(action)
    except ActionError as error:
        raise ToolSpecError(f"{where}: {error}") from None
    if tier != "pure" and (parsed.is_question or parsed.is_continuation):
        raise ToolSpecError(f"{where}: a question or a continuation is pure")
    return DeclaredStep(step_id, title, tier, action, key)


def _criterion(value: Any, n: int) -> Criterion:
    where = f"tools.criteria[{n}]"
    if not isinstance(value, dict):
        raise ToolSpecError(f"{where} must be an object")
    _no_unknown(value, _CRITERION_KEYS, where)
    text, kind = value.get("text"), value.get("checker_kind", "")
    checker, criterion_id = value.get("checker"), value.get("id", "")
    if not isinstance(text, str) or not text.strip():
        raise ToolSpecError(f"{where}.text must be a non-empty string")
    if not isinstance(kind, str) or not isinstance(criterion_id, str):
        raise ToolSpecError(f"{where}.id and .checker_kind must be strings")
    if checker is not None and not isinstance(checker, dict):
        raise ToolSpecError(f"{where}.checker must be an object")
    return Criterion(criterion_id or f"c{n + 1}", text, kind, checker)
