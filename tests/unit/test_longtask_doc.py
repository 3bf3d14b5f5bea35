"""docs/long-tasks.md's generated tables are exactly the ones the code's tables produce, and
the display folding is the seed's."""

from __future__ import annotations

from pathlib import Path

import pytest

from longtasks.domain.display import FOLDING, Shown, display
from longtasks.domain.doc import TABLES, marker
from longtasks.domain.states import TaskState as T
from longtasks.domain.states import WaitKind

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "long-tasks.md"


def _documented(name: str) -> str:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(marker(name)) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end]) + "\n"


@pytest.mark.parametrize("name", list(TABLES))
def test_each_generated_table_matches_the_code(name: str) -> None:
    assert _documented(name) == TABLES[name](), (
        f"docs/long-tasks.md's table {name!r} is stale: replace it with the output of "
        "`python -m longtasks.domain.doc`"
    )


def test_the_doc_has_no_generated_table_the_code_does_not_make() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert text.count("<!-- generated: ") == len(TABLES)


def test_the_folding_is_the_seeds() -> None:
    assert set(FOLDING) == set(T)  # the machine keeps every state; only the display folds
    shown = {state: display(state).shown for state in T}
    assert {s for s, d in shown.items() if d is Shown.IN_PROGRESS} == {T.RUNNING, T.VERIFYING}
    assert {s for s, d in shown.items() if d is Shown.WAITING_FOR_YOU} == {
        T.WAITING_FOR_USER,
        T.WAITING_FOR_APPROVAL,
    }
    assert display(T.WAITING_FOR_USER).wait_kind is WaitKind.DECISION
    assert display(T.WAITING_FOR_APPROVAL).wait_kind is WaitKind.APPROVAL
    for state in set(T) - {T.RUNNING, T.VERIFYING, T.WAITING_FOR_USER, T.WAITING_FOR_APPROVAL}:
        assert shown[state].value == state.value
        assert display(state).wait_kind is None
    assert display(T.QUEUED, ahead=2).label == "queued: 2 ahead of it"
    assert display(T.RUNNING, ahead=2) == display(T.RUNNING)


def test_no_other_module_folds_states() -> None:
    package = ROOT / "longtasks"
    folders = {
        path.relative_to(ROOT).as_posix()
        for path in package.rglob("*.py")
        if "in_progress" in path.read_text() or "waiting_for_you" in path.read_text()
    }
    assert folders == {"longtasks/domain/display.py"}
