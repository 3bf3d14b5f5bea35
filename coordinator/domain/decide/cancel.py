"""Cancel: before the start fence the run ends cancelled at once (nothing can be running);
after it the request is recorded and the run ends when the runtime confirms or the attempt
is settled otherwise."""

from __future__ import annotations

from coordinator.domain import commands as c
from coordinator.domain.decide.decision import AttemptWrite, Context, Decision, Outcome, RunWrite
from coordinator.domain.decide.helpers import (
    _attempt_change,
    _cancelled,
    _event,
    _finish_attempt,
    _live_after_fence,
    _run_update,
)
from coordinator.domain.decide.preconditions import can_cancel
from coordinator.domain.model import Attempt, Run
from coordinator.domain.redaction import summary
from coordinator.domain.states import AttemptStatus


def _request_cancel(
    cmd: c.RequestCancel, run: Run, attempt: Attempt | None, ctx: Context
) -> Decision:
    if not can_cancel(run, attempt):  # ended, or asked already: nothing changes
        outcome = Outcome.ALREADY_TERMINAL if run.status.terminal else Outcome.ALREADY_REQUESTED
        return Decision(outcome=outcome, run=run, run_write=RunWrite.NONE, attempt=attempt)
    reason = summary(cmd.reason) or "cancelled_by_user"
    events = [
        _event("run.cancel_requested", cmd.actor, attempt.id if attempt else None, reason=reason)
    ]
    if _live_after_fence(attempt):
        assert attempt is not None
        requested = _attempt_change(attempt, ctx, cancel_requested_at_ms=ctx.now_ms)
        return _run_update(
            run,
            ctx,
            events,
            requested,
            AttemptWrite.UPDATE,
            attempt,
            cancel_requested_at_ms=ctx.now_ms,
            cancel_reason=reason,
        )
    # Before the fence nothing can be running: cancelled at once, no runtime call.
    cancelled_attempt = None
    if attempt is not None and not attempt.status.terminal:
        cancelled_attempt = _finish_attempt(
            attempt,
            ctx,
            AttemptStatus.CANCELLED,
            "cancelled_before_start",
            cancel_requested_at_ms=ctx.now_ms,
        )
        events.append(
            _event("attempt.cancelled", cmd.actor, attempt.id, reason="cancelled_before_start")
        )
    events.append(
        _event(
            "run.cancelled",
            cmd.actor,
            attempt.id if attempt else None,
            from_status=run.status.value,
            reason=reason,
        )
    )
    return _cancelled(
        run,
        ctx,
        events,
        cancelled_attempt,
        attempt if cancelled_attempt else None,
        cancel_requested_at_ms=ctx.now_ms,
        cancel_reason=reason,
    )
