"""What a surface shows beside a task's display label (``display.py``): where it is in its
plan ("step 2/3 · send the email"), how often the same permission was asked, how much of a
partial task is proven, and the recovery prompt a person answers after an interruption.

Pure texts from the read model, so the dashboard, the CLI and a chat never compute them
themselves (seed C "macOS 桌面端展示" A-E: every text on a surface comes from the server).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from longtasks.domain.model import CriterionRecord, Decision, Effect, PlanStep
from longtasks.domain.states import (
    CriterionResult,
    DecisionKind,
    DecisionState,
    StepState,
    TaskState,
)

T = TaskState
_SETTLED = frozenset({StepState.COMPLETED, StepState.SKIPPED})


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, ..."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _open(decisions: Sequence[Decision], kind: DecisionKind | None = None) -> list[Decision]:
    return [
        d for d in decisions if d.state is DecisionState.OPEN and (kind is None or d.kind is kind)
    ]


def progress(
    state: TaskState,
    steps: Sequence[PlanStep],
    criteria: Sequence[CriterionRecord],
    decisions: Sequence[Decision],
) -> str:
    """The second line of a task's row: empty when the label says all there is."""
    total = len(steps)
    if state in (T.RUNNING, T.WAITING_FOR_APPROVAL, T.PAUSED, T.RECOVERY_REQUIRED) and total:
        current = next((s for s in steps if s.state not in _SETTLED), None)
        at = f"step {current.position}/{total} · {current.title}" if current else ""
        if state is T.WAITING_FOR_APPROVAL:
            asks = _open(decisions, DecisionKind.APPROVAL)
            if asks and asks[0].repeat_count > 1:
                again = f"{ordinal(asks[0].repeat_count)} request for the same permission"
                return f"{again} · {at}" if at else again
        return at
    if state is T.VERIFYING:
        return f"all {total} steps done · checking the acceptance criteria"
    if state is T.WAITING_FOR_USER:
        count = len(_open(decisions))
        return f"{count} question{'s' if count != 1 else ''} open" if count else ""
    if state is T.PARTIAL:
        required = [c for c in criteria if c.criterion.required]
        proven = sum(1 for c in required if c.result is CriterionResult.PASSED)
        return f"partial {proven}/{len(required)}: required criteria proven"
    return ""


def _at(ms: object) -> str:
    if not isinstance(ms, int):
        return "at an unknown time"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def recovery_prompt(
    state: TaskState,
    state_reason: str,
    decisions: Sequence[Decision],
    steps: Sequence[PlanStep] = (),
    effects: Sequence[Effect] = (),
) -> str:
    """The question a person answers after an interruption, written for them: the step an
    uncertain effect belongs to, with its intent record (an open ``effect`` decision), or,
    for ``recovery_required``, why the task stopped. Empty when nothing asks."""
    asked = _open(decisions, DecisionKind.EFFECT)
    if asked:
        try:
            material = json.loads(asked[0].material)
        except ValueError:
            material = {}
        if not isinstance(material, dict):
            material = {}
        title = material.get("title", "its current step")
        words = (
            f"Before the interruption it was working on “{title}”; truerun cannot tell "
            f"whether it was done. Intent recorded {_at(material.get('intent_recorded_at_ms'))}"
        )
        if material.get("target"):
            words += f", target {material['target']}"
        if material.get("summary"):
            words += f", summary “{material['summary']}”"
        return words + "."
    if state is T.RECOVERY_REQUIRED:
        return _stopped_prompt(state_reason, steps, effects)
    return ""


def _stopped_prompt(state_reason: str, steps: Sequence[PlanStep], effects: Sequence[Effect]) -> str:
    """recovery_required: the failed step recovery stopped at (``resolutions.stopped_step``)
    with its last intent record, else the general words (verification interrupted)."""
    failed = next((s for s in steps if s.state is StepState.FAILED), None)
    if failed is None:
        return (
            f"It stopped and needs a person before it goes on: {state_reason}. Check what "
            "happened, then let it go on (it is queued again) or cancel it."
        )
    words = (
        f"Before it stopped it was working on “{failed.title}”: {state_reason}. truerun "
        "cannot tell whether its work was done: if it was, skip the step; if not, it runs "
        "again."
    )
    mine = [e for e in effects if e.step_id == failed.step_id]
    effect = next((e for e in mine if e.id == failed.intent_id), mine[-1] if mine else None)
    if effect is None:
        return words
    words += f" Intent recorded {_at(effect.recorded_at_ms)}, target {effect.target}"
    return words + (f", summary “{effect.summary}”." if effect.summary else ".")
