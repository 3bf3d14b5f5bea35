"""What the step driver runs for a step: the step's declared action (``StepDraft.action``,
stored as the step's action spec; opaque to truerun) and its probe, and how a command's
receipt is read from its output.

An action is one of:

- ``{"run": "<shell>", "receipt": "json"|"none", "writes": "<path>", "approval": "<exact
  action>", "target": "<what it acts on>", "prepare": "<shell>"}``: a command (``writes``:
  a file-shaped step, its evidence the file's sha256; ``approval``: a person approves that
  exact action before the intent; ``target``: the intent's target, default ``writes`` or the
  step's title; ``prepare``: a command that must touch nothing outside, run after the step
  begins and before any approval or intent, e.g. to render what the effect will send: when
  it fails the step is blocked, since no effect was started);
- ``{"ask": "<question>", "options": [...]}``: a question to a person;
- ``{"continue": {"at" | "cron" | "every": ..., "zone": .., "catchup": ..}}``: the attempt
  asks for the task's next attempt later and ends; that attempt completes the step and goes
  on with the rest (``continuing.py``).

A probe is ``{"run": "<shell>"}``: exit 0 = done, 1 = not done, anything else = unknown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from truerun.v1 import long_task_service_pb2 as pb

from .continuing import ContinueError, parse_continue

RECEIPT_JSON = "json"
RECEIPT_NONE = "none"


class ActionError(ValueError):
    """The step's action cannot be run as declared (the step is blocked, nothing ran)."""


@dataclass(frozen=True)
class Action:
    run: str = ""
    receipt: str = RECEIPT_NONE
    writes: str = ""
    approval: str = ""
    target: str = ""
    prepare: str = ""
    ask: str = ""
    options: tuple[str, ...] = field(default_factory=tuple)
    later: pb.ContinuationSpec | None = None  # a declared continuation

    @property
    def is_question(self) -> bool:
        return bool(self.ask)

    @property
    def is_continuation(self) -> bool:
        return self.later is not None


def parse_action(spec: dict[str, Any]) -> Action:
    """The action from its spec; an ActionError names what is wrong."""
    if not isinstance(spec, dict) or not spec:
        raise ActionError(
            'the step declares no action ({"run": ...}, {"ask": ...} or {"continue": ...})'
        )
    if "continue" in spec:
        if "run" in spec or "ask" in spec:
            raise ActionError("an action is a command, a question or a continuation, one only")
        try:
            return Action(later=parse_continue(spec["continue"]))
        except ContinueError as error:
            raise ActionError(str(error)) from None
    ask = spec.get("ask")
    if ask is not None:
        options = spec.get("options") or []
        if not isinstance(ask, str) or not ask.strip():
            raise ActionError("ask must be a non-empty question")
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise ActionError("options must be a list of strings")
        if "run" in spec:
            raise ActionError("an action is a command (run) or a question (ask), not both")
        return Action(ask=ask, options=tuple(options))
    run = spec.get("run")
    if not isinstance(run, str) or not run.strip():
        raise ActionError("run must be a non-empty shell command")
    receipt = spec.get("receipt", RECEIPT_NONE)
    if receipt not in (RECEIPT_JSON, RECEIPT_NONE):
        raise ActionError(f'receipt must be "{RECEIPT_JSON}" or "{RECEIPT_NONE}", not {receipt!r}')
    strings = {name: spec.get(name, "") for name in ("writes", "approval", "target", "prepare")}
    for name, value in strings.items():
        if not isinstance(value, str):
            raise ActionError(f"{name} must be a string")
    return Action(
        run=run,
        receipt=receipt,
        writes=strings["writes"],
        approval=strings["approval"],
        target=strings["target"],
        prepare=strings["prepare"],
    )


def parse_probe(spec: dict[str, Any]) -> str:
    """The probe's shell command ("" when the step declares none)."""
    if not spec:
        return ""
    run = spec.get("run") if isinstance(spec, dict) else None
    if not isinstance(run, str) or not run.strip():
        raise ActionError('a probe is {"run": "<shell>"}')
    return run


@dataclass(frozen=True)
class CommandReceipt:
    """What the command said the outside world answered (its last stdout line)."""

    target: str
    summary: str
    at_ms: int
    external_id: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


class ReceiptError(ValueError):
    """The command's output holds no receipt as declared: the effect may have happened,
    so the step becomes uncertain, never completed."""


def parse_receipt(stdout: str, *, default_target: str = "") -> CommandReceipt:
    """The receipt a ``"receipt": "json"`` command prints as its LAST non-empty stdout line:
    ``{"external_id": .., "target": .., "summary": .., "at_ms": ..}``; ``target`` defaults to
    the intent's, ``detail`` (an object) is kept for display."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ReceiptError("the command printed no receipt (its last stdout line)")
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as error:
        raise ReceiptError(f"the last stdout line is not a JSON receipt: {error.msg}") from None
    if not isinstance(data, dict):
        raise ReceiptError("the receipt must be a JSON object")
    target = data.get("target", default_target) or default_target
    summary = data.get("summary")
    at_ms = data.get("at_ms")
    external_id = data.get("external_id", "")
    detail = data.get("detail", {})
    if not isinstance(target, str) or not target:
        raise ReceiptError("the receipt needs a target (a non-empty string)")
    if not isinstance(summary, str) or not summary.strip():
        raise ReceiptError("the receipt needs a summary (a non-empty string)")
    if isinstance(at_ms, bool) or not isinstance(at_ms, int | float) or at_ms <= 0:
        raise ReceiptError("the receipt needs at_ms (the outside world's time, ms since epoch)")
    if external_id is None:
        external_id = ""
    if not isinstance(external_id, str | int):
        raise ReceiptError("external_id must be a string")
    if not isinstance(detail, dict):
        raise ReceiptError("detail must be a JSON object")
    return CommandReceipt(target, summary, int(at_ms), str(external_id), detail)
