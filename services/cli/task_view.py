"""How `truerun task` shows long tasks (services/cli/task.py): the state in words (the one
folding, longtasks/domain/display.py, with the wait kind), criteria with their results and
evidence, steps with their classes, intents and receipts, decisions, plan versions and
attempts; times in this machine's local time, with how long ago or how long they took.
Pure: messages in, text out (and the clock, for "ago")."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2
from truerun.v1 import long_task_service_pb2 as pb

from longtasks.domain.display import display
from longtasks.domain.states import TaskState
from services.cli.client import duration
from services.cli.schedule_view import local, relative, table

TERMINAL = frozenset(
    {
        pb.LONG_TASK_STATE_PARTIAL,
        pb.LONG_TASK_STATE_COMPLETED,
        pb.LONG_TASK_STATE_FAILED,
        pb.LONG_TASK_STATE_CANCELLED,
    }
)
GOAL_WIDTH = 48


def _name(enum: Any, number: int, prefix: str) -> str:
    return str(enum.Name(number)).removeprefix(prefix).lower()


def stored_state(task: pb.LongTask) -> str:
    return _name(pb.LongTaskState, task.state, "LONG_TASK_STATE_")


def state_words(task: pb.LongTask) -> str:
    """``waiting for you (approval): waiting for your approval``: the state as people read
    it, its kind of wait, and why it stands (the services' reason when they give one)."""
    try:
        state = TaskState(stored_state(task))
    except ValueError:
        return "unknown state"
    queued = task.state == pb.LONG_TASK_STATE_QUEUED
    waiting = task.continuation.label if task.continuation.waiting else None
    ahead = task.queue_position if queued and waiting is None else None
    shown = display(state, ahead=ahead, waiting=waiting)
    words = shown.shown.value.replace("_", " ")
    if shown.wait_kind is not None:
        words += f" ({task.wait_kind or shown.wait_kind.value})"
    reason = task.state_reason.strip()
    said = shown.label if not reason or reason == shown.label else f"{shown.label}; {reason}"
    return said if said.startswith(f"{words}: ") else f"{words}: {said}"


def side_effect(step: pb.LongTaskStep | pb.StepDraft) -> str:
    return _name(pb.SideEffectClass, step.side_effect, "SIDE_EFFECT_CLASS_")


def _short(text: str, width: int) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def ls_state(task: pb.LongTask) -> str:
    """The STATE column: the state as people read it; a queued task its continuation holds
    says what it waits for (``queued, waiting for its next window at 09:00 (truerun must be
    running)``), never a plain "queued" that reads as waiting for a slot."""
    held = task.continuation.waiting and task.continuation.label
    if task.state == pb.LONG_TASK_STATE_QUEUED and held:
        return f"queued, {task.continuation.label}"
    return state_words(task).split(":")[0]


def _updated(task: pb.LongTask) -> str:
    """``2026-12-02 09:14:03 CET (3m 05s ago)``: when the task last changed."""
    if not task.HasField("update_time"):
        return "-"
    return f"{local(task.update_time, exact=False)} ({relative(task.update_time)})"


def ls_text(active: Sequence[pb.LongTask], recent: Sequence[pb.LongTask]) -> str:
    """The active tasks, then the recently finished ones, as two tables."""
    header = ["ID", "HANDLE", "STATE", "OWNER", "PLAN", "UPDATED (local)", "GOAL"]

    def rows(tasks: Sequence[pb.LongTask]) -> list[list[str]]:
        return [
            [
                t.long_task_id,
                t.handle or "-",
                ls_state(t),
                t.owner_id,
                f"v{t.plan_version}",
                _updated(t),
                _short(t.goal, GOAL_WIDTH),
            ]
            for t in tasks
        ]

    parts = [f"active\n{table(header, rows(active))}" if active else "active    (none)"]
    if recent:
        parts.append(f"recent\n{table(header, rows(recent))}")
    return "\n\n".join(parts)


def _struct_text(value: struct_pb2.Struct) -> str:
    shown = json_format.MessageToDict(value)
    return ", ".join(f"{k}={_plain(v)}" for k, v in sorted(shown.items()))


def _plain(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _evidence_lines(evidence: Sequence[pb.EvidenceRef], indent: str) -> list[str]:
    return [
        f"{indent}evidence {e.kind} {e.reference}: {e.summary}"
        + (f"  (receipt {e.effect_id})" if e.effect_id else "")
        + (f"  [{e.unavailable_reason}]" if e.unavailable else "")
        for e in evidence
    ]


def _effect_lines(effect: pb.SideEffectRecord, indent: str) -> list[str]:
    key = f"  key {effect.idempotency_key}" if effect.idempotency_key else ""
    lines = [f"{indent}intent   {effect.target}: {effect.summary}{key}  (try {effect.try_no})"]
    if effect.HasField("receipt"):
        r = effect.receipt
        external = f" id {r.external_id}" if r.external_id else ""
        at = f" at {local(r.time, exact=False)}" if r.HasField("time") else ""
        lines.append(f"{indent}receipt  {r.target}: {r.summary}{external}{at}")
    else:
        lines.append(f"{indent}receipt  (none yet: the effect's outcome is not known)")
    return lines


def criterion_lines(c: pb.Criterion) -> list[str]:
    result = _name(pb.CriterionResult, c.result, "CRITERION_RESULT_")
    result = "not checked yet" if result == "unspecified" else result
    source = f" by {c.result_source}" if c.result_source else ""
    how = f"checker {c.checker_kind}"
    if c.subjective:
        how = "subjective (a judge or a person decides)"
    params = _struct_text(c.checker)
    if params and not c.subjective:
        how += f" ({params})"
    need = "required" if c.required else "optional"
    written = f", by {c.author}" if c.author else ""
    if c.user_edited:
        written += " (a person's: a model's revision keeps it)"
    lines = [f"  [{result}{source}] {c.criterion_id}: {c.text}", f"      {need}, {how}{written}"]
    return lines + _evidence_lines(c.evidence, "      ")


def step_lines(s: pb.LongTaskStep) -> list[str]:
    state = _name(pb.StepState, s.state, "STEP_STATE_")
    tries = f", begun {s.attempt_count}x" if s.attempt_count else ""
    lines = [f"  {s.position}. {s.step_id}  [{state}]  {side_effect(s)}{tries}  {s.title}"]
    action = _struct_text(s.action)
    if action:
        lines.append(f"      runs     {action}")
    if s.idempotency_key:
        lines.append(f"      key      {s.idempotency_key}")
    if s.probe.fields:
        probe = _name(pb.ProbeResult, s.probe_result, "PROBE_RESULT_")
        found = "" if probe == "unspecified" else f"  (found: {probe.replace('_', ' ')})"
        lines.append(f"      probe    {_struct_text(s.probe)}{found}")
    if s.basis:
        lines.append(f"      basis    {s.basis}")
    if s.HasField("current_effect"):
        lines += _effect_lines(s.current_effect, "      ")
    return lines + _evidence_lines(s.evidence, "      ")


def decision_line(d: pb.Decision) -> str:
    asked = local(d.create_time, exact=False) if d.HasField("create_time") else "-"
    offered = f"  options: {', '.join(d.options)}" if d.options else ""
    repeat = f"  (asked {d.repeat_count}x)" if d.repeat_count > 1 else ""
    line = f"  {d.decision_id}  {d.kind} [{d.state}]  {asked}  {d.question}{offered}{repeat}"
    if d.subject:
        line += f"\n      action   {d.subject}"
    if d.answer:
        note = f" ({d.note})" if d.note else ""
        line += f"\n      answer   {d.answer}{note} by {d.answered_by}"
    if d.prompt:  # an open one: the words its notice carries, and how to answer it
        line += "".join(f"\n      {word:<8} {text}" for word, text in _prompt_rows(d.prompt))
    return line


def _prompt_rows(prompt: str) -> list[tuple[str, str]]:
    head, _, reply = prompt.partition("\nReply: ")
    return [("asks", head), ("reply", reply)] if reply else [("asks", head)]


def plan_line(p: pb.PlanVersion) -> str:
    closed = f"  closed in {p.closed_state}" if p.closed_state else "  (current)"
    when = local(p.create_time, exact=False) if p.HasField("create_time") else "-"
    reason = f": {p.reason}" if p.reason else ""
    return f"  v{p.version}  {when}  by {p.author} {p.created_by}{reason}{closed}"


def attempt_line(a: pb.LongTaskAttempt, now_s: float | None = None) -> str:
    start = local(a.start_time, exact=False) if a.HasField("start_time") else "-"
    end = local(a.end_time, exact=False) if a.HasField("end_time") else "live"
    outcome = f"  {a.outcome}" if a.outcome else ""
    reason = f": {a.reason}" if a.reason else ""
    took = ""
    if a.HasField("start_time"):
        began = a.start_time.ToMilliseconds() / 1000
        if a.HasField("end_time"):
            took = f"  (took {duration(a.end_time.ToMilliseconds() / 1000 - began)})"
        else:
            took = f"  (for {duration((time.time() if now_s is None else now_s) - began)})"
    return f"  #{a.attempt_no}  run {a.run_id}  plan v{a.plan_version}  {start} -> {end}" + (
        took + outcome + reason
    )


#: From this share of its token budget on, `task show` warns before the budget runs out.
TOKEN_WARNING = 0.8


def budget_text(b: pb.LongTaskBudget) -> str:
    parts = [f"attempts {b.attempts_used}/{b.max_attempts or 'default'}"]
    if b.max_tokens:
        parts.append(f"tokens {b.tokens_used:,} of {b.max_tokens:,}")
    elif b.tokens_used:
        parts.append(f"tokens {b.tokens_used:,} (no cap)")
    if b.HasField("deadline"):
        parts.append(f"until {local(b.deadline, exact=False)}")
    return "   ".join(parts)


def budget_warning(b: pb.LongTaskBudget) -> str | None:
    """A line before the token budget runs out (seed: usage visible before exhaustion)."""
    if not b.max_tokens or b.tokens_used < TOKEN_WARNING * b.max_tokens:
        return None
    share = min(b.tokens_used * 100 // b.max_tokens, 100)
    if b.tokens_used >= b.max_tokens:
        return f"warning    the token budget is used up ({share}%)"
    return (
        f"warning    {share}% of the token budget is used: when it runs out the task stops "
        "(partial, or failed with nothing done)"
    )


def continuation_lines(task: pb.LongTask) -> list[str]:
    """The continuation: when the next attempt may start (in the continuation's zone), and
    what the last catch-up said ("missed 3 continuations while truerun was not running")."""
    if not task.HasField("continuation"):
        return []
    c = task.continuation
    when = c.cron or (f"every {c.every.ToSeconds()}s" if c.HasField("every") else "at")
    head = f"continue   {c.kind}: {when}" + (f" ({c.time_zone})" if c.cron else "")
    if c.HasField("due_time"):
        head += f", next {local(c.due_time, c.time_zone, exact=False)}"
    if c.HasField("fire_time"):
        head += f", fired {local(c.fire_time, exact=False)}"
    lines = [head]
    if c.note:
        lines.append(f"catch-up   {c.note}")
    return lines


def where_lines(task: pb.LongTask) -> list[str]:
    """The server's words for where the task is (``progress``) and, when a person must
    judge an interruption, its recovery prompt with the resolutions it takes now."""
    lines = [f"progress   {task.progress}"] if task.progress else []
    if task.recovery_prompt:
        lines.append(f"recovery   {task.recovery_prompt}")
    if task.recovery_resolutions:
        flags = " | ".join(f"--{r}" for r in task.recovery_resolutions)
        lines.append(f"resolve    truerun task clear-recovery {task.long_task_id} [{flags}]")
    return lines


def describe(task: pb.LongTask) -> str:
    """Everything `task show` prints about one task."""
    lines = [
        f"task       {task.long_task_id} ({task.handle or '-'})   project {task.project_id}"
        f"   owner {task.owner_id}" + (f"   agent {task.agent_id}" if task.agent_id else ""),
        f"goal       {task.goal}",
        f"state      {state_words(task)}   (stored: {stored_state(task)})",
        *where_lines(task),
        f"plan       v{task.plan_version}   etag {task.etag}",
        f"budget     {budget_text(task.budget)}",
    ]
    warning = budget_warning(task.budget)
    if warning is not None:
        lines.append(warning)
    lines.extend(continuation_lines(task))
    if task.source_run_id or task.source_ref:
        came = [f"promoted from run {task.source_run_id}"] if task.source_run_id else []
        lines.append("source     " + "   ".join([*came, *filter(None, [task.source_ref])]))
    if task.constraints:
        lines.append("constraints")
        lines.extend(f"  - {c}" for c in task.constraints)
    if task.HasField("create_time"):
        lines.append(f"created    {local(task.create_time, exact=False)} by {task.created_by}")
    if task.HasField("finish_time"):
        lines.append(f"finished   {local(task.finish_time, exact=False)}")
    sections: list[tuple[str, list[str]]] = [
        ("criteria", [line for c in task.criteria for line in criterion_lines(c)]),
        ("steps", [line for s in task.steps for line in step_lines(s)]),
        ("decisions (newest first)", [decision_line(d) for d in task.decisions]),
        ("plan versions", [plan_line(p) for p in task.plan_versions]),
        ("attempts", [attempt_line(a) for a in task.attempts]),
    ]
    for title, body in sections:
        lines.append(title if body else f"{title}   (none)")
        lines.extend(body)
    return "\n".join(lines)


def event_line(e: pb.LongTaskEvent) -> str:
    when = local(e.create_time, exact=False) if e.HasField("create_time") else "-"
    moved = f"{e.from_state} -> {e.to_state}".strip() if e.to_state else ""
    moved = f"  ({moved})" if moved and moved not in e.message else ""
    about = "".join(
        f"  {name} {value}"
        for name, value in (("step", e.step_id), ("decision", e.decision_id))
        if value
    )
    by = f"  by {e.actor_type}:{e.actor_id}" if e.actor_type else ""
    return f"  {e.sequence:>4}  {when}  {e.type:<18} {e.message}{moved}{about}{by}"


def created_text(task: pb.LongTask) -> str:
    steps = ", ".join(f"{s.step_id} ({side_effect(s)})" for s in task.steps)
    return (
        f"{task.long_task_id}  {state_words(task)}\n"
        f"  goal   {task.goal}\n  steps  {steps or '(none)'}\n"
        f"  criteria {len(task.criteria)}   etag {task.etag}"
    )


def moved_text(task: pb.LongTask, verb: str) -> str:
    handle = f" ({task.handle})" if task.handle else ""
    return f"{task.long_task_id}{handle}  {verb}; now {state_words(task)}"
