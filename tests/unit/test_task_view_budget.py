"""`truerun task show`'s budget line (services/cli/task_view.py): token usage is visible
before the budget runs out ("tokens 1,200 of 5,000"), with a warning line from 80% on."""

from __future__ import annotations

from truerun.v1 import long_task_service_pb2 as pb

from services.cli.task_view import budget_text, budget_warning, describe


def _budget(used: int, cap: int) -> pb.LongTaskBudget:
    return pb.LongTaskBudget(max_attempts=5, attempts_used=1, tokens_used=used, max_tokens=cap)


def _shown(budget: pb.LongTaskBudget) -> list[str]:
    task = pb.LongTask(
        long_task_id="lt-1", goal="g", state=pb.LONG_TASK_STATE_RUNNING, budget=budget
    )
    return describe(task).splitlines()


def test_usage_is_shown_with_thousands_separators_before_the_budget_runs_out() -> None:
    assert budget_text(_budget(1200, 5000)) == "attempts 1/5   tokens 1,200 of 5,000"
    lines = _shown(_budget(1200, 5000))
    assert "budget     attempts 1/5   tokens 1,200 of 5,000" in lines
    assert not [line for line in lines if line.startswith("warning")]


def test_usage_without_a_cap_is_shown_once_there_is_some() -> None:
    assert budget_text(_budget(0, 0)) == "attempts 1/5"
    assert budget_text(_budget(42_000, 0)) == "attempts 1/5   tokens 42,000 (no cap)"
    assert budget_warning(_budget(42_000, 0)) is None


def test_a_warning_line_from_80_percent_on() -> None:
    assert budget_warning(_budget(3999, 5000)) is None
    warning = (
        "warning    80% of the token budget is used: when it runs out the task stops "
        "(partial, or failed with nothing done)"
    )
    assert budget_warning(_budget(4000, 5000)) == warning
    lines = _shown(_budget(4000, 5000))
    assert lines[lines.index("budget     attempts 1/5   tokens 4,000 of 5,000") + 1] == warning
    assert budget_warning(_budget(4999, 5000)) == warning.replace("80%", "99%")
    assert budget_warning(_budget(5500, 5000)) == "warning    the token budget is used up (100%)"
