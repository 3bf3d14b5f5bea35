"""A runtime's refusal of a Start (``DispatchRejected``): back to the queue (bounded like a
recovery), failed for good when the refusal is permanent, or cancelled when a cancel was
already requested."""

from __future__ import annotations

from coordinator.domain import commands as c
from coordinator.domain.decide.decision import AttemptWrite, Context, Decision
from coordinator.domain.decide.helpers import (
    _cancelled_before_start,
    _event,
    _finish_attempt,
    _requeued_as_recovery,
    _require,
    _run_update,
)
from coordinator.domain.model import Attempt, NewEvent, Run
from coordinator.domain.redaction import summary
from coordinator.domain.states import AttemptStatus, ObservedState, RunStatus


def _dispatch_rejected(
    cmd: c.DispatchRejected, run: Run, attempt: Attempt, ctx: Context
) -> Decision:
    _require(
        attempt.status is AttemptStatus.STARTING
        and attempt.observed_state is ObservedState.UNCONFIRMED,
        "take back a Start the runtime already accepted",
        run,
        attempt,
    )
    runtime = attempt.runtime_instance_id or cmd.actor.id
    reason = summary(cmd.reason) or "refused"
    events = [
        _event(
            "attempt.start_rejected",
            cmd.actor,
            attempt.id,
            reason=reason,
            seq=cmd.seq,
            permanent=cmd.permanent,
            runtime_instance_id=runtime,
        ),
    ]
    if run.cancel_requested_at_ms is not None:
        return _cancelled_before_start(run, attempt, ctx, cmd.actor, events)
    if cmd.permanent:
        return _refused_for_good(cmd, run, attempt, ctx, events, f"refused by {runtime}: {reason}")
    # a refusal is counted like a recovery, and bounded the same way
    return _requeued_as_recovery(
        run,
        attempt,
        ctx,
        cmd.actor,
        events,
        cmd.max_refusals,
        code="refused_too_often",
        cause=f"refused by {runtime}: {reason}",
    )


def _refused_for_good(
    cmd: c.DispatchRejected,
    run: Run,
    attempt: Attempt,
    ctx: Context,
    events: list[NewEvent],
    why: str,
) -> Decision:
    """The spec can never run there: the run fails with the runtime's reason (nothing ran,
    so no retry policy applies: retrying the same spec would be refused again)."""
    failed = _finish_attempt(
        attempt,
        ctx,
        AttemptStatus.FAILED,
        "start_refused",
        error_code="start_refused",
        error_summary=why,
    )
    events.append(_event("attempt.failed", cmd.actor, attempt.id, reason="start_refused"))
    events.append(_event("run.failed", cmd.actor, attempt.id, reason=why))
    return _run_update(
        run,
        ctx,
        events,
        failed,
        AttemptWrite.UPDATE,
        attempt,
        status=RunStatus.FAILED,
        finished_at_ms=ctx.now_ms,
        error_code="start_refused",
        error_summary=why,
    )
