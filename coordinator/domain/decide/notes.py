"""Notes: facts about a run that change none of its state (activation's preflights, verdicts
and promotions, docs/long-tasks.md "Activation and promotion"; a long task's notices shown
on the runs it came from, "Notices"). Only the event is written and the run's event
sequence moves; the type must be one of ``commands.NOTE_TYPES``. A finished run takes no
activation note (its run is over), but does take a notice: the task the run became goes
on after it, and the person watching the run learns there what the task needs."""

from __future__ import annotations

from coordinator.domain import commands as c
from coordinator.domain.decide.decision import Context, Decision, Outcome, RunWrite
from coordinator.domain.decide.helpers import _event, _require
from coordinator.domain.model import Attempt, Run
from kernel.errors import InvalidArgument


def _note_run(cmd: c.NoteRun, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    if cmd.type not in c.NOTE_TYPES:
        raise InvalidArgument(f"{cmd.type!r} is no run note")
    if cmd.type != c.LONG_TASK_NOTICE:
        _require(not run.status.terminal, f"note {cmd.type}", run, attempt)
    event = _event(cmd.type, cmd.actor, run.current_attempt_id, **cmd.details)
    return Decision(
        outcome=Outcome.APPLIED,
        run=run,
        run_write=RunWrite.EVENTS_ONLY,
        attempt=attempt,
        events=(event,),
    )
