"""Runtime evidence: which events are only recorded (late, duplicate, out of order), and
what an applied one does: accepted, running, a note or output, and the result that ends
the attempt (a confirmed cancel is a cancelled result)."""

from __future__ import annotations

from typing import Any

from coordinator.domain import commands as c
from coordinator.domain import output
from coordinator.domain.decide.decision import AttemptWrite, Context, Decision
from coordinator.domain.decide.helpers import (
    _attempt_change,
    _event,
    _finish_attempt,
    _recorded_only,
    _require,
    _run_update,
)
from coordinator.domain.model import Actor, Attempt, NewEvent, Run
from coordinator.domain.redaction import summary
from coordinator.domain.states import AttemptStatus, ObservedState, RunStatus, SyncState
from kernel.records import replace


def _why_ignored(cmd: c.RuntimeCommand, run: Run, attempt: Attempt) -> str | None:
    # A refusal is the answer to one Start, not an event of the attempt's sequence: its seq
    # (0 as the protocol says, or whatever a runtime sends) neither gates it nor moves.
    sequenced = not isinstance(cmd, c.DispatchRejected)
    if sequenced and cmd.seq <= 0:
        return "missing_seq"
    if attempt.status.terminal or run.status.terminal:
        return "after_terminal"
    if run.current_attempt_id != attempt.id:
        return "not_current_attempt"
    if sequenced and cmd.seq <= attempt.last_event_seq:
        return "duplicate_or_out_of_order"
    return None


def _ignored(cmd: c.RuntimeCommand, run: Run, attempt: Attempt, why: str) -> Decision:
    event = _event(
        "attempt.late_callback_ignored",
        cmd.actor,
        attempt.id,
        seq=cmd.seq,
        last_event_seq=attempt.last_event_seq,
        reported_type=type(cmd).__name__,
        ignored_because=why,
    )
    return _recorded_only(run, attempt, event)


def _evidence(attempt: Attempt, cmd: c.RuntimeCommand, ctx: Context, **changes: Any) -> Attempt:
    return _attempt_change(
        attempt,
        ctx,
        last_event_seq=cmd.seq,
        observed_at_ms=ctx.now_ms,
        sync_state=SyncState.IN_SYNC,
        sync_reason=None,
        **changes,
    )


def _runtime_accepted(cmd: c.RuntimeAccepted, run: Run, attempt: Attempt, ctx: Context) -> Decision:
    observed = attempt.observed_state
    if observed is ObservedState.UNCONFIRMED:
        observed = ObservedState.ACCEPTED
    accepted = _evidence(attempt, cmd, ctx, observed_state=observed)
    events = [_event("attempt.accepted", cmd.actor, attempt.id, seq=cmd.seq)]
    return _run_update(run, ctx, events, accepted, AttemptWrite.UPDATE, attempt)


def _runtime_running(cmd: c.RuntimeRunning, run: Run, attempt: Attempt, ctx: Context) -> Decision:
    if cmd.turn_active is False:
        # The task exists, its turn is idle: evidence of acceptance, not of running.
        accepted = c.RuntimeAccepted(
            cmd.run_id, cmd.attempt_id, cmd.runtime_task_id, cmd.seq, cmd.actor
        )
        return _runtime_accepted(accepted, run, attempt, ctx)
    running = _evidence(
        attempt,
        cmd,
        ctx,
        status=AttemptStatus.RUNNING,
        observed_state=ObservedState.RUNNING,
        started_at_ms=attempt.started_at_ms or ctx.now_ms,
    )
    if attempt.status is AttemptStatus.RUNNING:
        events = [_event("attempt.progress", cmd.actor, attempt.id, seq=cmd.seq)]
        return _run_update(run, ctx, events, running, AttemptWrite.UPDATE, attempt)
    events = [
        _event("attempt.running", cmd.actor, attempt.id, seq=cmd.seq),
        _event("run.running", cmd.actor, attempt.id),
    ]
    return _run_update(
        run,
        ctx,
        events,
        running,
        AttemptWrite.UPDATE,
        attempt,
        status=RunStatus.RUNNING,
        started_at_ms=run.started_at_ms or ctx.now_ms,
    )


def _runtime_note(cmd: c.RuntimeNote, run: Run, attempt: Attempt, ctx: Context) -> Decision:
    if cmd.kind is c.NoteKind.OUTPUT:
        return _runtime_output(cmd, run, attempt, ctx)
    noted = _evidence(attempt, cmd, ctx)
    events = [
        _event(f"attempt.{cmd.kind.value}", cmd.actor, attempt.id, seq=cmd.seq, **cmd.details)
    ]
    return _run_update(run, ctx, events, noted, AttemptWrite.UPDATE, attempt)


def _runtime_output(cmd: c.RuntimeNote, run: Run, attempt: Attempt, ctx: Context) -> Decision:
    """The chunk goes to the output store; the event log gets at most a periodic note."""
    taken = output.take(attempt.id, output.state_of(attempt), cmd.details, ctx.output, ctx.now_ms)
    noted = _evidence(attempt, cmd, ctx, **output.columns(taken.state))
    events = []
    if taken.note is not None:
        events.append(
            _event("attempt.output_progressed", cmd.actor, attempt.id, seq=cmd.seq, **taken.note)
        )
    if taken.truncated_now:
        events.append(_truncated(cmd.actor, attempt.id, taken.state, ctx.output))
    decision = _run_update(run, ctx, events, noted, AttemptWrite.UPDATE, attempt)
    return replace(decision, output=taken.pieces)


def _truncated(
    actor: Actor, attempt_id: str, state: output.OutputState, policy: output.OutputPolicy
) -> NewEvent:
    return _event(
        "attempt.output_truncated",
        actor,
        attempt_id,
        offset=state.stored_bytes,
        log_bytes=state.log_bytes,
        reason=f"the attempt's stored output reached its cap of {policy.max_bytes} bytes",
    )


_OBSERVED_FOR_OUTCOME = {
    c.RuntimeOutcome.SUCCEEDED: ObservedState.SUCCEEDED,
    c.RuntimeOutcome.FAILED: ObservedState.FAILED,
    c.RuntimeOutcome.TIMED_OUT: ObservedState.FAILED,
    c.RuntimeOutcome.CANCELLED: ObservedState.CANCELLED,
}
_ATTEMPT_FOR_OUTCOME = {
    c.RuntimeOutcome.SUCCEEDED: AttemptStatus.SUCCEEDED,
    c.RuntimeOutcome.FAILED: AttemptStatus.FAILED,
    c.RuntimeOutcome.TIMED_OUT: AttemptStatus.TIMED_OUT,
    c.RuntimeOutcome.CANCELLED: AttemptStatus.CANCELLED,
}
_RUN_FOR_OUTCOME = {
    c.RuntimeOutcome.SUCCEEDED: RunStatus.SUCCEEDED,
    c.RuntimeOutcome.FAILED: RunStatus.FAILED,
    c.RuntimeOutcome.TIMED_OUT: RunStatus.TIMED_OUT,
    c.RuntimeOutcome.CANCELLED: RunStatus.CANCELLED,
}
_ERROR_FOR_OUTCOME = {
    c.RuntimeOutcome.SUCCEEDED: None,
    c.RuntimeOutcome.FAILED: "process_exit_error",
    c.RuntimeOutcome.TIMED_OUT: "timeout",
    c.RuntimeOutcome.CANCELLED: "cancelled_by_user",
}


def _runtime_result(cmd: c.RuntimeResult, run: Run, attempt: Attempt, ctx: Context) -> Decision:
    outcome = cmd.outcome
    error_code = cmd.error_code or _ERROR_FOR_OUTCOME[outcome]
    error_summary = summary(cmd.error_summary)
    attempt_status = _ATTEMPT_FOR_OUTCOME[outcome]
    run_status = _RUN_FOR_OUTCOME[outcome]
    termination = outcome.value
    if run.cancel_requested_at_ms is not None:
        # The cancel committed first: whatever the process did afterwards, the run is cancelled.
        attempt_status, run_status, termination = (
            AttemptStatus.CANCELLED,
            RunStatus.CANCELLED,
            "cancel_requested",
        )
        error_code = "cancelled_by_user"
    elif outcome is c.RuntimeOutcome.FAILED and attempt.attempt_no < run.max_attempts:
        run_status = RunStatus.RETRY_WAIT
    # the line the task was still writing is complete now: stored with the result
    flushed = output.finish(attempt.id, output.state_of(attempt), ctx.output)
    evidence = _evidence(
        attempt,
        cmd,
        ctx,
        **output.columns(flushed.state),
        observed_state=_OBSERVED_FOR_OUTCOME[outcome],
        exit_code=cmd.exit_code,
        error_code=error_code if attempt_status is not AttemptStatus.SUCCEEDED else None,
        error_summary=error_summary,
    )
    finished = _finish_attempt(evidence, ctx, attempt_status, termination)
    events = [
        _event(
            f"attempt.{attempt_status.value}",
            cmd.actor,
            attempt.id,
            seq=cmd.seq,
            outcome=outcome.value,
            exit_code=cmd.exit_code,
            error_code=finished.error_code,
            error_summary=error_summary,
        ),
        _event(f"run.{run_status.value}", cmd.actor, attempt.id),
    ]
    run_changes: dict[str, Any] = {"status": run_status}
    if run_status.terminal:
        run_changes.update(
            finished_at_ms=ctx.now_ms,
            error_code=finished.error_code,
            error_summary=error_summary if run_status is not RunStatus.SUCCEEDED else None,
        )
    else:
        run_changes.update(error_code=finished.error_code, error_summary=error_summary)
    if flushed.truncated_now:
        events.insert(0, _truncated(cmd.actor, attempt.id, flushed.state, ctx.output))
    decision = _run_update(run, ctx, events, finished, AttemptWrite.UPDATE, attempt, **run_changes)
    return replace(decision, output=flushed.pieces)


def _cancel_confirmed(cmd: c.CancelConfirmed, run: Run, attempt: Attempt, ctx: Context) -> Decision:
    _require(
        run.cancel_requested_at_ms is not None, "confirm a cancel nobody requested", run, attempt
    )
    result = c.RuntimeResult(
        run_id=cmd.run_id,
        attempt_id=cmd.attempt_id,
        runtime_task_id=cmd.runtime_task_id,
        seq=cmd.seq,
        actor=cmd.actor,
        outcome=c.RuntimeOutcome.CANCELLED,
        exit_code=cmd.exit_code,
    )
    return _runtime_result(result, run, attempt, ctx)
