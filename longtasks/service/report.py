"""A long task as a Markdown report (ExportLongTask; seed C "导出"): a pure render of the read
model. It is an export for people and never read back: nothing in truerun parses it, and no
state is ever taken from it (the task's state lives in its rows only)."""

from __future__ import annotations

from datetime import UTC, datetime

from longtasks.domain.model import Decision, Effect, Evidence, PlanStep
from longtasks.service.reads import TaskView


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(text.replace("|", "\\|").split())


def _effect(effect: Effect) -> list[str]:
    lines = [
        f"  - intent (try {effect.try_no}, {_when(effect.recorded_at_ms)}): "
        f"{_cell(effect.target)}: {_cell(effect.summary)}"
        + (f" (key `{_cell(effect.idempotency_key)}`)" if effect.idempotency_key else "")
    ]
    receipt = effect.receipt
    if receipt is None:
        lines.append("  - receipt: **none recorded** (the effect may or may not have happened)")
    else:
        ext = f" [{_cell(receipt.external_id)}]" if receipt.external_id else ""
        lines.append(
            f"  - receipt ({_when(receipt.at_ms)}){ext}: "
            f"{_cell(receipt.target)}: {_cell(receipt.summary)}"
        )
    return lines


def _evidence(evidence: Evidence) -> str:
    gone = f" ({_cell(evidence.unavailable_reason)})" if evidence.unavailable_reason else ""
    return (
        f"  - evidence ({_cell(evidence.kind)}) `{_cell(evidence.reference)}`: "
        f"{_cell(evidence.summary)}{gone}"
    )


def _step(step: PlanStep, view: TaskView) -> list[str]:
    lines = [
        f"### {step.position}. {_cell(step.title)} (`{step.step_id}`)",
        "",
        f"- state: **{step.state}**, side effect: {step.side_effect}, "
        f"tries: {step.attempt_count}" + (f", basis: {step.basis}" if step.basis else ""),
    ]
    for effect in view.effects_of(step.step_id):
        lines.extend(_effect(effect))
    lines.extend(_evidence(e) for e in view.evidence_of_step(step.step_id))
    return [*lines, ""]


def _decision(decision: Decision) -> str:
    answer = (
        f"answered **{_cell(decision.answer or '')}** by {decision.answered_by}"
        f" ({_when(decision.answered_at_ms)})"
        if decision.answer is not None
        else decision.state.value
    )
    return (
        f"- {decision.kind} ({_when(decision.created_at_ms)}): {_cell(decision.question)}: {answer}"
    )


def render(view: TaskView) -> str:
    task = view.task
    out = [
        f"# Long task {task.id}",
        "",
        f"**Goal:** {_cell(task.goal)}",
        "",
        f"- project: {task.project_id}, owner: {task.owner_id}",
        f"- state: **{view.display.shown}** ({task.state}): {_cell(task.state_reason)}"
        if task.state_reason
        else f"- state: **{view.display.shown}** ({task.state})",
        f"- plan version: {task.plan_version}, attempts: {task.budget.attempts_used}"
        f" of {task.budget.max_attempts}",
        f"- created {_when(task.created_at_ms)} by {task.created_by}; "
        f"finished {_when(task.finished_at_ms)}",
        "",
    ]
    if view.constraints:
        out += ["## Constraints", "", *(f"- {_cell(c)}" for c in view.constraints), ""]
    out += ["## Steps", ""]
    for step in view.steps:
        out.extend(_step(step, view))
    out += ["## Acceptance criteria", "", "| criterion | required | checker | result |"]
    out.append("|---|---|---|---|")
    for record in view.criteria:
        c = record.criterion
        source = f" ({record.result_source})" if record.result_source else ""
        out.append(
            f"| `{c.id}` {_cell(c.text)} | {'yes' if c.required else 'no'} | "
            f"{c.checker or 'subjective'} | {record.result}{source} |"
        )
    out.append("")
    for record in view.criteria:
        bound = view.evidence_of_criterion(record.criterion.id)
        if bound:
            out.append(f"Evidence for `{record.criterion.id}`:")
            out.extend(_evidence(e) for e in bound)
            out.append("")
    if view.decisions:
        out += ["## Decisions", "", *(_decision(d) for d in view.decisions), ""]
    out += ["## Plan versions", ""]
    for plan in view.plans:
        closed = f", closed in {plan.closed_state}" if plan.closed_state else ""
        out.append(
            f"- v{plan.version} by {plan.author} ({plan.created_by}, "
            f"{_when(plan.created_at_ms)}): {_cell(plan.reason)}{closed}"
        )
    out.append("")
    if view.attempts:
        out += ["## Attempts", ""]
        for a in view.attempts:
            ended = (
                f"ended {_when(a.ended_at_ms)}: {a.outcome}: {_cell(a.reason)}"
                if a.ended_at_ms is not None
                else "live"
            )
            out.append(f"- #{a.attempt_no} run `{a.run_id}` (plan v{a.plan_version}): {ended}")
        out.append("")
    out.append("_An export of the stored record; truerun never reads it back._")
    return "\n".join(out) + "\n"
