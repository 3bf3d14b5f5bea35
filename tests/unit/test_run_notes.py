"""Run notes (coordinator/domain/decide/notes.py): only the allow-listed types; an
activation note needs an unfinished run, a long task's notice is taken by any run, finished
too (its task goes on after it: docs/long-tasks.md "Notices"); the payload keeps only the
allow-listed keys, redacted, and the run itself never changes."""

from __future__ import annotations

import pytest

from coordinator.domain import commands as c
from coordinator.domain.decide import RunWrite, decide
from coordinator.domain.states import AttemptStatus as A
from coordinator.domain.states import RunStatus as R
from kernel.errors import InvalidArgument, InvalidTransition
from tests.unit.test_transitions_exhaustive import SCHEDULER, make_attempt, make_context, make_run

NOTICE = {
    "kind": "approval",
    "title": "#3 asks for your approval (2nd request for the same permission)",
    "text": "#3 asks (approval): May I send it? token=abcdef0123456789",
    "long_task_id": "lt-1",
    "handle": "#3",
    "command": "/longtask approve #3 7 or /longtask deny #3 7",
    "material": "the whole draft",  # not allow-listed: dropped
}


@pytest.mark.parametrize("status", list(R))
def test_a_notice_is_taken_by_every_run_and_an_activation_note_only_by_an_unfinished_one(
    status: R,
) -> None:
    attempt = make_attempt(A.SUCCEEDED if status.terminal else A.RUNNING)
    run = make_run(status, attempt)
    notice = c.NoteRun(run.id, SCHEDULER, type=c.LONG_TASK_NOTICE, details=dict(NOTICE))
    decision = decide(notice, run, attempt, make_context())
    assert decision.run_write is RunWrite.EVENTS_ONLY and decision.run == run
    [event] = decision.events
    assert event.type == "long_task.notice"
    assert set(event.payload) == set(NOTICE) - {"material"}
    assert event.payload["title"] == NOTICE["title"]
    assert "abcdef0123456789" not in event.payload["text"]  # redacted as every payload
    activation = c.NoteRun(run.id, SCHEDULER, type="activation.classified", details={})
    if status.terminal:
        with pytest.raises(InvalidTransition):
            decide(activation, run, attempt, make_context())
    else:
        assert decide(activation, run, attempt, make_context()).events


def test_a_type_not_in_the_list_is_refused() -> None:
    attempt = make_attempt(A.RUNNING)
    run = make_run(R.RUNNING, attempt)
    with pytest.raises(InvalidArgument):
        decide(c.NoteRun(run.id, SCHEDULER, type="long_task.other"), run, attempt, make_context())
