"""Inspect and recovery: an attempt declared lost, the automatic retry that follows a loss
or a failure, the runtime's answer to an Inspect, and an orphan the runtime reports."""

from __future__ import annotations

from coordinator.domain import commands as c
from coordinator.domain.decide.decision import AttemptWrite, Context, Decision, Outcome, RunWrite
from coordinator.domain.decide.helpers import (
    _attempt_change,
    _cancelled,
    _cancelled_before_start,
    _dead_letter_if_exhausted,
    _enqueue_new_attempt,
    _event,
    _finish_attempt,
    _live_after_fence,
    _recorded_only,
    _requeued_as_recovery,
    _require,
    _run_update,
    _the_started_attempt,
)
from coordinator.domain.decide.runtime import _runtime_result, _runtime_running
from coordinator.domain.model import Attempt, NewEvent, Run
from coordinator.domain.states import ActorType, AttemptStatus, ObservedState, RunStatus, SyncState
from kernel.errors import RuntimeTaskMismatch
from kernel.records import replace


def _mark_lost(cmd: c.MarkLost, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    _require(
        _live_after_fence(attempt) and not run.status.terminal,
        "declare the attempt lost (only a started attempt can be lost)",
        run,
        attempt,
    )
    assert attempt is not None
    lost = _finish_attempt(attempt, ctx, AttemptStatus.LOST, cmd.reason)
    events = [_event("attempt.lost", cmd.actor, attempt.id, reason=cmd.reason)]
    if run.cancel_requested_at_ms is not None:
        # Cancel was asked for and the process is provably gone: the intent is fulfilled.
        events.append(_event("run.cancelled", cmd.actor, attempt.id, reason="cancelled_and_lost"))
        return _cancelled(run, ctx, events, lost, attempt)
    events.append(_event("run.lost", cmd.actor, attempt.id, reason=cmd.reason))
    return _run_update(
        run,
        ctx,
        events,
        lost,
        AttemptWrite.UPDATE,
        attempt,
        status=RunStatus.LOST,
        error_code="worker_lost",
    )


def _retry_attempt(
    cmd: c.RetryAttempt, run: Run, attempt: Attempt | None, ctx: Context
) -> Decision:
    from_retry_wait = run.status is RunStatus.RETRY_WAIT
    from_lost = run.status is RunStatus.LOST and (
        run.idempotent or cmd.actor.type is ActorType.OPERATOR
    )
    _require(
        (from_retry_wait or from_lost)
        and attempt is not None
        and attempt.status.terminal
        and run.cancel_requested_at_ms is None,
        "retry automatically (only from retry_wait, or from lost when the task is idempotent "
        "or an operator decides)",
        run,
        attempt,
    )
    assert attempt is not None
    recovery = cmd.recovery and from_lost
    if recovery:
        dead_events: list[NewEvent] = []
        dead = _dead_letter_if_exhausted(run, cmd.max_recoveries, cmd.actor, attempt, dead_events)
        if dead is not None:
            return _run_update(run, ctx, dead_events, attempt, **dead)
    events = [_event("run.retrying", cmd.actor, attempt.id, from_status=run.status.value)]
    decision = _enqueue_new_attempt(run, attempt, ctx, cmd.actor, events)
    if not recovery:
        return decision
    return replace(decision, run=replace(decision.run, recovery_count=run.recovery_count + 1))


def _inspect_answer(
    cmd: c.InspectAnswer, run: Run, attempt: Attempt | None, ctx: Context
) -> Decision:
    attempt = _the_started_attempt(cmd.attempt_id, run, attempt, "apply an inspect answer")
    if cmd.runtime_task_id != attempt.runtime_task_id:
        raise RuntimeTaskMismatch(
            f"runtime task {cmd.runtime_task_id!r} is not the task of attempt {attempt.id}",
            attempt_id=attempt.id,
        )
    state = cmd.state
    if state is c.InspectState.NEVER_RECEIVED:
        if _without_evidence(attempt):
            return _never_received(cmd, run, attempt, ctx)
        # It sent evidence of this attempt yet says it never got the Start: the answer proves
        # nothing, and the task may be gone; as "not found", a person decides.
        state = c.InspectState.NOT_FOUND
    if state in _GONE:
        return _mark_lost(c.MarkLost(run.id, cmd.actor, reason=_GONE[state]), run, attempt, ctx)
    # An answer is not a runtime event: it must not use up a seq the runtime may still send,
    # so the decisions below run with the next seq and the attempt keeps its last one.
    synthetic_seq = attempt.last_event_seq + 1
    if state is c.InspectState.FINISHED and cmd.last_seq > attempt.last_event_seq:
        # The runtime wrote events truerun has not applied (output, the terminal event):
        # they are on their way and say more than this answer; finishing now would drop them.
        return Decision(outcome=Outcome.IGNORED, run=run, run_write=RunWrite.NONE, attempt=attempt)
    if state is c.InspectState.FINISHED:
        result = c.RuntimeResult(
            run.id,
            attempt.id,
            attempt.runtime_task_id,
            synthetic_seq,
            cmd.actor,
            outcome=cmd.outcome or c.RuntimeOutcome.FAILED,
            exit_code=cmd.exit_code,
            error_summary=None if cmd.outcome else "the runtime did not say how it ended",
        )
        return _keep_seq(_runtime_result(result, run, attempt, ctx), attempt)
    proven_running = state is c.InspectState.RUNNING and cmd.turn_active is not False
    if proven_running and attempt.status is AttemptStatus.STARTING:
        running = c.RuntimeRunning(
            run.id, attempt.id, attempt.runtime_task_id, synthetic_seq, cmd.actor
        )
        return _keep_seq(_runtime_running(running, run, attempt, ctx), attempt)
    observed = ObservedState.RUNNING if proven_running else attempt.observed_state
    if not proven_running and observed is ObservedState.UNCONFIRMED:
        observed = ObservedState.ACCEPTED
    synced = _attempt_change(
        attempt,
        ctx,
        sync_state=SyncState.IN_SYNC,
        sync_reason=None,
        observed_state=observed,
        observed_at_ms=ctx.now_ms,
    )
    events = [
        _event(
            "attempt.inspected",
            cmd.actor,
            attempt.id,
            outcome=state.value,
            sync_state=SyncState.IN_SYNC.value,
            observed_state=observed.value,
        )
    ]
    return _run_update(run, ctx, events, synced, AttemptWrite.UPDATE, attempt)


#: Inspect answers that prove the task gone from its runtime, and the loss reason each gives.
_GONE = {
    c.InspectState.NOT_FOUND: "runtime_says_not_found",
    c.InspectState.LOST: "runtime_reports_lost: the runtime had the task, its process and "
    "supervisor are gone and no exit status was recorded; the outcome is unknown",
}


def _without_evidence(attempt: Attempt) -> bool:
    """Fenced, and nothing from the runtime since: no answer, no event, no acceptance."""
    return (
        attempt.status is AttemptStatus.STARTING
        and attempt.observed_state is ObservedState.UNCONFIRMED
        and attempt.last_event_seq == 0
    )


def _never_received(cmd: c.InspectAnswer, run: Run, attempt: Attempt, ctx: Context) -> Decision:
    """The runtime proves the Start never reached it (seed A §9: no process exists), so the
    same attempt goes back to the queue, like a refusal before start: counted as a recovery
    and bounded the same way; cancelled when a cancel was already asked for."""
    why = "the runtime's journal of received Starts has no record of this one"
    events = [
        _event(
            "attempt.start_never_received",
            cmd.actor,
            attempt.id,
            reason=why,
            runtime_instance_id=attempt.runtime_instance_id,
        )
    ]
    if run.cancel_requested_at_ms is not None:
        return _cancelled_before_start(run, attempt, ctx, cmd.actor, events)
    return _requeued_as_recovery(
        run, attempt, ctx, cmd.actor, events, cmd.max_recoveries, cause=f"never received: {why}"
    )


def _orphan_reported(
    cmd: c.OrphanReported, run: Run, attempt: Attempt | None, ctx: Context
) -> Decision:
    """Recorded only (sync `diverged` in the event); an orphan never changes truerun's state."""
    event = _event(
        "attempt.orphan_reported",
        cmd.actor,
        cmd.attempt_id,
        runtime_instance_id=cmd.runtime_instance_id,
        sync_state=SyncState.DIVERGED.value,
        reason="the runtime runs a task truerun holds finished or elsewhere",
    )
    return _recorded_only(run, attempt, event)


def _keep_seq(decision: Decision, before: Attempt) -> Decision:
    """A decision an Inspect answer made through a runtime command: the attempt keeps its
    last seq, and its events say where the evidence came from instead of naming a seq the
    runtime never sent (the runtime's own event with that seq may still come)."""
    assert decision.attempt is not None
    events = tuple(
        replace(
            e, payload={**{k: v for k, v in e.payload.items() if k != "seq"}, "source": "inspect"}
        )
        for e in decision.events
    )
    return replace(
        decision,
        attempt=replace(decision.attempt, last_event_seq=before.last_event_seq),
        events=events,
    )
