"""A person's resolution of recovery_required (longtasks/domain/resolutions.py), against
every plan shape recovery stops at, and each move legal by the step table on a person's word."""

from __future__ import annotations

import pytest

from longtasks.domain.model import Step
from longtasks.domain.resolutions import (
    Resolution,
    Resolved,
    offered,
    resolve_recovery,
    stopped_step,
)
from longtasks.domain.rules import Refusal, Refused, StepCommand, StepMoved, decide_step
from longtasks.domain.states import Basis, SideEffect, StepState, TaskState

S, E, R = StepState, SideEffect, Resolution
FAILED_PLAN = [
    Step(1, S.COMPLETED, E.PURE, evidence=("ev",)),
    Step(2, S.FAILED, E.NON_IDEMPOTENT, intent_id="i", receipt_id="r"),
    Step(3, S.PENDING, E.PURE),
]
VERIFIED_PLAN = [Step(1, S.COMPLETED, E.PURE, evidence=("ev",)), Step(2, S.SKIPPED, E.PURE)]


def test_the_stopped_step_is_the_first_failed_one() -> None:
    assert stopped_step(FAILED_PLAN) == FAILED_PLAN[1]
    assert stopped_step(VERIFIED_PLAN) is None


@pytest.mark.parametrize(
    ("resolution", "command", "after"),
    [(R.SKIP, StepCommand.SKIP, S.SKIPPED), (R.RETRY, StepCommand.REOPEN, S.PENDING)],
)
def test_skip_and_retry_move_the_failed_step_on_a_persons_word(
    resolution: Resolution, command: StepCommand, after: StepState
) -> None:
    resolved = resolve_recovery(FAILED_PLAN, resolution)
    assert isinstance(resolved, Resolved)
    assert (resolved.step_index, resolved.command) == (2, command)
    moved = decide_step(TaskState.RECOVERY_REQUIRED, FAILED_PLAN[1], command, basis=Basis.USER)
    assert isinstance(moved, StepMoved) and moved.after is after
    # never the attempt's own act, never on another basis
    own = decide_step(TaskState.RUNNING, FAILED_PLAN[1], command)
    assert isinstance(own, Refused) and own.reason is Refusal.BASIS_REQUIRED
    for basis in set(Basis) - {Basis.USER}:
        other = decide_step(TaskState.RECOVERY_REQUIRED, FAILED_PLAN[1], command, basis=basis)
        assert isinstance(other, Refused), basis
    assert moved.fresh_try is (command is StepCommand.REOPEN)  # the old try's record is gone


def test_go_on_moves_no_step() -> None:
    for plan in (FAILED_PLAN, VERIFIED_PLAN):
        assert resolve_recovery(plan, R.GO_ON) == Resolved(
            None, None, "checked by a person: it goes on as it is"
        )


def test_an_interrupted_verification_retries_but_has_nothing_to_skip() -> None:
    retried = resolve_recovery(VERIFIED_PLAN, R.RETRY)
    assert isinstance(retried, Resolved) and retried.command is None
    assert "checked again" in retried.why
    skipped = resolve_recovery(VERIFIED_PLAN, R.SKIP)
    assert isinstance(skipped, Refused) and skipped.reason is Refusal.NO_STOPPED_STEP


def test_a_finished_task_takes_no_resolution_move() -> None:
    for task in (TaskState.PARTIAL, TaskState.FAILED, TaskState.CANCELLED):
        moved = decide_step(task, FAILED_PLAN[1], StepCommand.SKIP, basis=Basis.USER)
        assert isinstance(moved, Refused) and moved.reason is Refusal.TASK_TERMINAL


def test_what_a_surface_offers() -> None:
    assert offered(FAILED_PLAN) == (R.SKIP, R.RETRY)
    assert offered(VERIFIED_PLAN) == (R.RETRY,)
    for resolution in offered(FAILED_PLAN) + offered(VERIFIED_PLAN):  # each one is taken
        assert isinstance(resolve_recovery(FAILED_PLAN, resolution), Resolved)
