"""The commands a run offers are exactly the commands it accepts: for every reachable state
(tests/unit/test_transitions_exhaustive.py's shapes, which cover every run status and every
display state) and every command a person sends, ``allowed_commands`` lists it if and only
if ``decide`` applies it (docs/state-model.md "What a run allows")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import pytest

from coordinator.domain import commands as c
from coordinator.domain.decide import Outcome, RunCommandName, allowed_commands, decide
from coordinator.domain.display import display_state
from coordinator.domain.states import DisplayState
from coordinator.domain.states import RunStatus as R
from kernel.errors import InvalidTransition
from tests.unit.test_transitions_exhaustive import (
    OPERATOR,
    RUN_ID,
    SHAPES,
    USER,
    Shape,
    build,
    make_context,
)

#: Each offered name and the command(s) it stands for: offered when one of them applies
#: (resolve's answer is the person's; one answer may be refused where another is not).
SENT: Final[dict[RunCommandName, tuple[Callable[[], c.RunCommand], ...]]] = {
    RunCommandName.CANCEL: (lambda: c.RequestCancel(RUN_ID, USER, reason="no longer needed"),),
    RunCommandName.RETRY: (lambda: c.ManualRetry(RUN_ID, USER),),
    RunCommandName.APPROVE: (lambda: c.Approve(RUN_ID, USER),),
    RunCommandName.RESOLVE: (
        lambda: c.Resolve(RUN_ID, OPERATOR, reason="r", resolved_as=c.ResolveAs.FAILED),
        lambda: c.Resolve(RUN_ID, OPERATOR, reason="r", resolved_as=c.ResolveAs.SUCCEEDED),
        lambda: c.Resolve(RUN_ID, OPERATOR, reason="r", resolved_as=c.ResolveAs.NOT_STARTED),
    ),
    RunCommandName.PAUSE: (lambda: c.PauseRun(RUN_ID, OPERATOR, reason="r"),),
    RunCommandName.RESUME: (lambda: c.ResumeRun(RUN_ID, OPERATOR, reason="r"),),
    RunCommandName.REQUEUE: (lambda: c.Requeue(RUN_ID, OPERATOR, reason="r"),),
    RunCommandName.FAIL: (lambda: c.FailRun(RUN_ID, OPERATOR, reason="r"),),
}


def _applies(shape: Shape, make: Callable[[], c.RunCommand]) -> bool:
    run, attempt = build(shape)
    try:
        decision = decide(make(), run, attempt, make_context())
    except InvalidTransition:
        return False
    # a cancel of an ended or already-cancelling run is answered, but changes nothing
    return decision.outcome is Outcome.APPLIED


def test_every_sent_command_has_a_name_and_back() -> None:
    assert set(SENT) == set(RunCommandName)


#: The reachable shapes, plus a waiting_approval run without a live attempt: no command
#: enters waiting_approval yet, and with its running attempt it shows running, so this is the
#: one way to meet the waiting_approval display state.
CASES: Final = [*SHAPES, Shape(R.WAITING_APPROVAL, None)]


@pytest.mark.parametrize("shape", CASES, ids=lambda s: s.id)
def test_offered_is_exactly_what_decide_applies(shape: Shape) -> None:
    run, attempt = build(shape)
    offered = allowed_commands(run, attempt)
    assert len(set(offered)) == len(offered)
    for name, makes in SENT.items():
        assert (name in offered) == any(_applies(shape, make) for make in makes), (name, shape.id)


def test_the_shapes_cover_every_run_status_and_every_display_state() -> None:
    built = [build(s) for s in CASES]
    assert {run.status for run, _ in built} == set(R)
    assert {display_state(run, attempt) for run, attempt in built} == set(DisplayState)


def _offered(run_status: R, shown: DisplayState) -> set[frozenset[str]]:
    """The distinct offers of every case with this run status and display state."""
    found: set[frozenset[str]] = set()
    for shape in CASES:
        run, attempt = build(shape)
        if run.status is run_status and display_state(run, attempt) is shown:
            found.add(frozenset(str(name) for name in allowed_commands(run, attempt)))
    return found


def only(*names: str) -> set[frozenset[str]]:
    return {frozenset(names)}


def test_what_a_person_sees_offered_in_the_common_states() -> None:
    """The documented table (docs/state-model.md), spot-checked by display state."""
    assert _offered(R.QUEUED, DisplayState.QUEUED) == only("cancel", "pause", "fail")
    assert _offered(R.PAUSED, DisplayState.PAUSED) == only("cancel", "resume", "fail")
    assert _offered(R.DEAD_LETTER, DisplayState.DEAD_LETTER) == only("cancel", "requeue", "fail")
    assert _offered(R.PENDING_APPROVAL, DisplayState.PENDING_APPROVAL) == only("cancel", "approve")
    assert _offered(R.LOST, DisplayState.LOST) == only("cancel", "resolve")
    assert _offered(R.SUCCEEDED, DisplayState.SUCCEEDED) == only()
    for ended in (R.FAILED, R.CANCELLED, R.TIMED_OUT):
        assert _offered(ended, DisplayState(ended.value)) == only("retry")
    assert _offered(R.RUNNING, DisplayState.UNKNOWN) == only("cancel", "resolve")
    assert _offered(R.RUNNING, DisplayState.RUNNING) == only("cancel")
    # cancelling: resolvable only once the evidence went stale (the run then ends cancelled)
    assert _offered(R.RUNNING, DisplayState.CANCELLING) == only() | only("resolve")
    # started, never confirmed running: a person may settle it
    assert _offered(R.DISPATCHING, DisplayState.WAITING_RUNTIME) == only("cancel", "resolve")
