"""The boundary ending (longtasks/domain/boundary.py): partial with a useful result, failed
without, for every combination of step states and criterion results."""

from __future__ import annotations

from itertools import product

import pytest

from longtasks.domain.boundary import Boundary, boundary_command, useful_result
from longtasks.domain.rules import TaskCommand, decide_task
from longtasks.domain.states import CriterionResult, StepState, TaskState

_PARTIAL = {
    Boundary.BUDGET: TaskCommand.BUDGET_EXHAUSTED,
    Boundary.CORRECTIONS: TaskCommand.VERIFICATION_INCOMPLETE,
}


@pytest.mark.parametrize("boundary", list(Boundary))
@pytest.mark.parametrize("step", [None, *StepState])
@pytest.mark.parametrize("criterion", [None, *CriterionResult])
def test_every_single_step_and_criterion(
    boundary: Boundary, step: StepState | None, criterion: CriterionResult | None
) -> None:
    steps = [] if step is None else [step]
    criteria = [] if criterion is None else [criterion]
    useful = step is StepState.COMPLETED or criterion is CriterionResult.PASSED
    expected = _PARTIAL[boundary] if useful else TaskCommand.FAIL
    assert boundary_command(boundary, steps, criteria) is expected
    assert useful_result(steps, criteria) is useful


def test_every_pair_of_steps_with_unmet_criteria() -> None:
    unmet = [CriterionResult.FAILED, CriterionResult.UNPROVEN]
    for pair in product(StepState, repeat=2):
        useful = StepState.COMPLETED in pair
        got = boundary_command(Boundary.BUDGET, pair, unmet)
        assert got is (TaskCommand.BUDGET_EXHAUSTED if useful else TaskCommand.FAIL), pair


def test_a_skipped_step_is_no_result() -> None:
    skipped = [StepState.SKIPPED, StepState.SKIPPED]
    assert boundary_command(Boundary.CORRECTIONS, skipped, [CriterionResult.FAILED]) is (
        TaskCommand.FAIL
    )


def test_the_ending_is_a_legal_move_from_where_each_boundary_is_reached() -> None:
    """A budget runs out in any unfinished state; corrections end while verifying."""
    where = {
        Boundary.BUDGET: [TaskState.QUEUED, TaskState.RUNNING, TaskState.VERIFYING],
        Boundary.CORRECTIONS: [TaskState.VERIFYING],
    }
    for boundary, states in where.items():
        for state in states:
            for useful, after in ((True, TaskState.PARTIAL), (False, TaskState.FAILED)):
                steps = [StepState.COMPLETED] if useful else [StepState.PENDING]
                moved = decide_task(state, boundary_command(boundary, steps, []))
                assert getattr(moved, "after", None) is after, (boundary, state, useful)
