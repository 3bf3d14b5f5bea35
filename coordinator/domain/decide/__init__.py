"""The transition function: (command, current run, attempt) -> decision. Pure, no I/O.

A decision names the rows to write and the events to append; the store writes all of it in
one transaction with compare-and-set on the run version and the attempt status + sequence.

``decide`` routes each command to its handler: ``create`` (creation), ``approval``, ``claim``
(claim, release, start fence), ``cancel``, ``recovery`` (lost, retry, inspect, orphan),
``operator`` (the audited escape hatches), and runtime evidence through one gate to
``runtime`` and ``refusal``. ``preconditions`` says which commands a run's state allows (the
handlers check the same predicates). ``decision`` holds the types every one of them returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.domain import commands as c
from coordinator.domain.decide.approval import _approve
from coordinator.domain.decide.cancel import _request_cancel
from coordinator.domain.decide.claim import (
    _claim,
    _dispatch_unknown,
    _release,
    _start_accepted,
    _start_fence,
)
from coordinator.domain.decide.create import _create, _manual_retry
from coordinator.domain.decide.decision import (
    AttemptWrite,
    Context,
    Decision,
    Outcome,
    RunWrite,
    chain,
)
from coordinator.domain.decide.helpers import _require
from coordinator.domain.decide.notes import _note_run
from coordinator.domain.decide.operator import _fail_run, _pause, _requeue, _resolve, _resume
from coordinator.domain.decide.preconditions import RunCommandName, allowed_commands
from coordinator.domain.decide.recovery import (
    _inspect_answer,
    _mark_lost,
    _orphan_reported,
    _retry_attempt,
)
from coordinator.domain.decide.refusal import _dispatch_rejected
from coordinator.domain.decide.runtime import (
    _cancel_confirmed,
    _ignored,
    _runtime_accepted,
    _runtime_note,
    _runtime_result,
    _runtime_running,
    _why_ignored,
)
from coordinator.domain.model import Attempt, Run
from coordinator.domain.states import AttemptStatus
from kernel.errors import InvalidArgument, RuntimeTaskMismatch, VersionConflict

# What other modules import from here; the handlers stay private to the package.
__all__ = [
    "AttemptWrite",
    "Context",
    "Decision",
    "Outcome",
    "RunCommandName",
    "RunWrite",
    "allowed_commands",
    "chain",
    "decide",
]


def decide(
    command: c.Command | c.RunCommand | c.RuntimeCommand,
    run: Run | None,
    attempt: Attempt | None,
    ctx: Context,
) -> Decision:
    """Decide what ``command`` does to ``run`` (and its ``attempt``); raise if it may not."""
    if isinstance(command, c.CreateRun):
        return _create(command.spec, ctx, retry_of=None)
    if run is None:
        raise InvalidArgument("a run is required")
    if isinstance(command, c.RuntimeCommand):
        return _runtime(command, run, attempt, ctx)
    if command.expected_version is not None and command.expected_version != run.version:
        raise VersionConflict(
            f"run {run.id} is at version {run.version}, not {command.expected_version}",
            run_id=run.id,
            current_version=str(run.version),
        )
    handler = _RUN_HANDLERS[type(command)]
    return handler(command, run, attempt, ctx)


def _runtime(cmd: c.RuntimeCommand, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    """The gate every runtime event passes: it must name this run's attempt and task; a late,
    duplicate or out-of-order one is only recorded; the rest need a Start to have been sent."""
    if attempt is None or attempt.run_id != run.id or attempt.id != cmd.attempt_id:
        raise InvalidArgument(f"attempt {cmd.attempt_id} does not belong to run {run.id}")
    if cmd.runtime_task_id != attempt.runtime_task_id:
        raise RuntimeTaskMismatch(
            f"runtime task {cmd.runtime_task_id!r} is not the task of attempt {attempt.id}",
            attempt_id=attempt.id,
        )
    why_ignored = _why_ignored(cmd, run, attempt)
    if why_ignored is not None:
        return _ignored(cmd, run, attempt, why_ignored)
    _require(
        attempt.fenced and attempt.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING),
        f"apply runtime evidence {type(cmd).__name__} (no Start was sent)",
        run,
        attempt,
    )
    handler = _RUNTIME_HANDLERS[type(cmd)]
    return handler(cmd, run, attempt, ctx)


#: Run commands (everything but creation and runtime evidence), one handler each.
_RUN_HANDLERS: dict[type, Callable[[Any, Run, Attempt | None, Context], Decision]] = {
    c.Approve: _approve,
    c.Claim: _claim,
    c.ReleaseBeforeFence: _release,
    c.StartFence: _start_fence,
    c.DispatchUnknown: _dispatch_unknown,
    c.StartAccepted: _start_accepted,
    c.RequestCancel: _request_cancel,
    c.MarkLost: _mark_lost,
    c.RetryAttempt: _retry_attempt,
    c.ManualRetry: _manual_retry,
    c.InspectAnswer: _inspect_answer,
    c.OrphanReported: _orphan_reported,
    c.Resolve: _resolve,
    c.FailRun: _fail_run,
    c.PauseRun: _pause,
    c.ResumeRun: _resume,
    c.Requeue: _requeue,
    c.NoteRun: _note_run,
}


#: Runtime evidence that passed the gate: the attempt is this run's, fenced and unfinished.
_RUNTIME_HANDLERS: dict[type, Callable[[Any, Run, Attempt, Context], Decision]] = {
    c.DispatchRejected: _dispatch_rejected,
    c.RuntimeAccepted: _runtime_accepted,
    c.RuntimeRunning: _runtime_running,
    c.RuntimeResult: _runtime_result,
    c.RuntimeNote: _runtime_note,
    c.CancelConfirmed: _cancel_confirmed,
}
