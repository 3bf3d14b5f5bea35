"""The tables of docs/long-tasks.md, generated from the domain's own tables so that they
cannot drift (tests/unit/test_longtask_doc.py compares them). ``python -m
longtasks.domain.doc`` prints them all."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from longtasks.domain.display import FOLDING
from longtasks.domain.recovery import RECOVERY_RULES, RecoveryRule
from longtasks.domain.rules import (
    CONTINUATIONS,
    CREATED,
    STEP_TRANSITIONS,
    TASK_REFUSALS,
    TASK_TRANSITIONS,
    UNCERTAIN_EXITS,
    StepCommand,
    TaskCommand,
)
from longtasks.domain.states import SideEffect, StepState, TaskState


def _code(values: Iterable[object]) -> str:
    return ", ".join(f"`{v}`" for v in values) or "—"


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def task_states() -> str:
    return _table(
        ("state", "terminal", "holds a slot", "holds the lease"),
        (
            (f"`{s}`", *("yes" if flag else "" for flag in (s.terminal, s.active, s.leased)))
            for s in TaskState
        ),
    )


def task_transitions() -> str:
    grouped: dict[tuple[TaskCommand, str], list[TaskState]] = defaultdict(list)
    for (source, command), target in TASK_TRANSITIONS.items():
        grouped[(command, "(stays)" if target is source else f"`{target}`")].append(source)
    rows = [("`create`", "(no task)", f"`{CREATED}`")]
    for command in TaskCommand:
        for (cmd, to), sources in grouped.items():
            if cmd is command:
                in_order = [s for s in TaskState if s in sources]
                rows.append((f"`{command}`", _code(in_order), to))
    continued: dict[TaskState, list[TaskState]] = defaultdict(list)
    for finished, start in CONTINUATIONS.items():
        continued[start].append(finished)
    for start, finished_states in continued.items():
        to = f"a new plan version in `{start}`; the old version keeps its state"
        rows.append((f"`{TaskCommand.CONTINUE}`", _code(finished_states), to))
    return _table(("command", "from", "to"), rows)


def task_refusals() -> str:
    return _table(
        ("state", "command", "refusal"),
        ((f"`{s}`", f"`{c}`", f"`{r}`") for (s, c), r in TASK_REFUSALS.items()),
    )


def step_transitions() -> str:
    rows = (
        (f"`{state}`", f"`{command}`", f"`{after}`" if after is not state else "(stays)")
        for state in StepState
        for command in StepCommand
        if (after := STEP_TRANSITIONS.get((state, command))) is not None
    )
    return _table(("step state", "command", "to"), rows)


def uncertain_exits() -> str:
    commands = dict.fromkeys(command for command, _ in UNCERTAIN_EXITS)
    rows = (
        (
            f"`{command}`",
            *(_code(sorted(UNCERTAIN_EXITS[(command, e)])) for e in SideEffect),
        )
        for command in commands
    )
    return _table(("from `uncertain`", *(f"`{e}`" for e in SideEffect)), rows)


def recovery_rules() -> str:
    def cond(value: bool | None) -> str:
        return "any" if value is None else ("yes" if value else "no")

    def row(number: int, rule: RecoveryRule) -> tuple[str, ...]:
        classes = "any" if rule.classes == frozenset(SideEffect) else _code(sorted(rule.classes))
        probes = "any" if rule.probes is None else _code(sorted(rule.probes))
        basis = f"`{rule.basis}`" if rule.basis else "—"
        conditions = (cond(rule.evidence), cond(rule.receipt), cond(rule.intent))
        return (str(number), classes, *conditions, probes, f"`{rule.action}`", basis, rule.why)

    header = ("#", "class", "evidence", "receipt", "intent", "probe", "action", "basis", "why")
    return _table(header, (row(n, r) for n, r in enumerate(RECOVERY_RULES, 1)))


def display_folding() -> str:
    rows = (
        (
            f"`{state}`",
            f"`{d.shown}`",
            f"`{d.wait_kind}`" if d.wait_kind else "",
            d.label,
            f"`{d.action}`",
        )
        for state, d in FOLDING.items()
    )
    return _table(("state", "shown as", "wait kind", "label", "main action"), rows)


#: Every generated table, by name (each sits right under its ``marker`` in the doc).
TABLES: dict[str, Callable[[], str]] = {
    "Task states": task_states,
    "Task transitions": task_transitions,
    "Refusals": task_refusals,
    "Step transitions": step_transitions,
    "Leaving uncertain": uncertain_exits,
    "Recovery decision": recovery_rules,
    "Display folding": display_folding,
}


def marker(name: str) -> str:
    """The line right above a generated table in docs/long-tasks.md."""
    return f"<!-- generated: {name} (python -m longtasks.domain.doc) -->"


if __name__ == "__main__":
    for name, render in TABLES.items():
        print(f"{marker(name)}\n{render()}")
