"""A long task as an HTML report (ExportLongTask with format HTML; seed C "导出"): a pure render
of the read model, like the Markdown one (``report.py``). Every stored string goes through
``html.escape`` (a goal, a step title or a receipt may hold anything, ``<script>`` included),
the page carries no script and loads nothing. An export for people, never read back: nothing
in truerun parses it."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

from longtasks.domain.model import Decision, Effect, Evidence, PlanStep
from longtasks.service.reads import TaskView

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3rem .5rem}"
    ".gone{color:#a40}"
)


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _effect(effect: Effect) -> list[str]:
    key = f" (key <code>{_e(effect.idempotency_key)}</code>)" if effect.idempotency_key else ""
    out = [
        f"<li>intent (try {effect.try_no}, {_when(effect.recorded_at_ms)}): "
        f"{_e(effect.target)}: {_e(effect.summary)}{key}</li>"
    ]
    receipt = effect.receipt
    if receipt is None:
        out.append(
            "<li>receipt: <strong>none recorded</strong> (may or may not have happened)</li>"
        )
    else:
        ext = f" [{_e(receipt.external_id)}]" if receipt.external_id else ""
        out.append(
            f"<li>receipt ({_when(receipt.at_ms)}){ext}: {_e(receipt.target)}: "
            f"{_e(receipt.summary)}</li>"
        )
    return out


def _evidence(evidence: Evidence) -> str:
    gone = (
        f' <span class="gone">{_e(evidence.unavailable_reason)}</span>'
        if evidence.unavailable_reason
        else ""
    )
    return (
        f"<li>evidence ({_e(evidence.kind)}) <code>{_e(evidence.reference)}</code>: "
        f"{_e(evidence.summary)}{gone}</li>"
    )


def _step(step: PlanStep, view: TaskView) -> list[str]:
    basis = f", basis: {_e(step.basis)}" if step.basis else ""
    items = [
        f"<li>state: <strong>{_e(step.state)}</strong>, side effect: {_e(step.side_effect)}, "
        f"tries: {step.attempt_count}{basis}</li>"
    ]
    for effect in view.effects_of(step.step_id):
        items.extend(_effect(effect))
    items.extend(_evidence(e) for e in view.evidence_of_step(step.step_id))
    return [
        f"<h3>{step.position}. {_e(step.title)} (<code>{_e(step.step_id)}</code>)</h3>",
        "<ul>",
        *items,
        "</ul>",
    ]


def _decision(decision: Decision) -> str:
    answer = (
        f"answered <strong>{_e(decision.answer or '')}</strong> by "
        f"{_e(decision.answered_by or '')} ({_when(decision.answered_at_ms)})"
        if decision.answer is not None
        else _e(decision.state)
    )
    return (
        f"<li>{_e(decision.kind)} ({_when(decision.created_at_ms)}): "
        f"{_e(decision.question)}: {answer}</li>"
    )


def _criteria(view: TaskView) -> list[str]:
    out = [
        "<h2>Acceptance criteria</h2>",
        "<table><tr><th>criterion</th><th>required</th><th>checker</th><th>result</th></tr>",
    ]
    for record in view.criteria:
        c = record.criterion
        source = f" ({_e(record.result_source)})" if record.result_source else ""
        out.append(
            f"<tr><td><code>{_e(c.id)}</code> {_e(c.text)}</td>"
            f"<td>{'yes' if c.required else 'no'}</td><td>{_e(c.checker or 'subjective')}</td>"
            f"<td>{_e(record.result)}{source}</td></tr>"
        )
    out.append("</table>")
    for record in view.criteria:
        bound = view.evidence_of_criterion(record.criterion.id)
        if bound:
            out.append(f"<p>Evidence for <code>{_e(record.criterion.id)}</code>:</p><ul>")
            out.extend(_evidence(e) for e in bound)
            out.append("</ul>")
    return out


def render_html(view: TaskView) -> str:
    task = view.task
    reason = f": {_e(task.state_reason)}" if task.state_reason else ""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Long task {_e(task.id)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>Long task {_e(task.id)}</h1>",
        f"<p><strong>Goal:</strong> {_e(task.goal)}</p>",
        "<ul>",
        f"<li>project: {_e(task.project_id)}, owner: {_e(task.owner_id)}</li>",
        f"<li>state: <strong>{_e(view.display.shown)}</strong> ({_e(task.state)}){reason}</li>",
        f"<li>plan version: {task.plan_version}, attempts: {task.budget.attempts_used} of "
        f"{task.budget.max_attempts}</li>",
        f"<li>created {_when(task.created_at_ms)} by {_e(task.created_by)}; "
        f"finished {_when(task.finished_at_ms)}</li>",
        "</ul>",
    ]
    if view.constraints:
        out += ["<h2>Constraints</h2><ul>", *(f"<li>{_e(c)}</li>" for c in view.constraints)]
        out.append("</ul>")
    out.append("<h2>Steps</h2>")
    for step in view.steps:
        out.extend(_step(step, view))
    out.extend(_criteria(view))
    if view.decisions:
        out += ["<h2>Decisions</h2><ul>", *(_decision(d) for d in view.decisions), "</ul>"]
    out.append("<h2>Plan versions</h2><ul>")
    for plan in view.plans:
        closed = f", closed in {_e(plan.closed_state)}" if plan.closed_state else ""
        out.append(
            f"<li>v{plan.version} by {_e(plan.author)} ({_e(plan.created_by)}, "
            f"{_when(plan.created_at_ms)}): {_e(plan.reason)}{closed}</li>"
        )
    out.append("</ul>")
    if view.attempts:
        out.append("<h2>Attempts</h2><ul>")
        for a in view.attempts:
            ended = (
                f"ended {_when(a.ended_at_ms)}: {_e(a.outcome)}: {_e(a.reason)}"
                if a.ended_at_ms is not None
                else "live"
            )
            out.append(
                f"<li>#{a.attempt_no} run <code>{_e(a.run_id)}</code> "
                f"(plan v{a.plan_version}): {ended}</li>"
            )
        out.append("</ul>")
    out.append("<p><em>An export of the stored record; truerun never reads it back.</em></p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
