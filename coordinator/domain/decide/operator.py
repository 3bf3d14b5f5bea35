"""Operator commands, the audited escape hatches: pause, resume, fail, requeue a
dead-lettered run, and resolve an unknown, lost or stuck attempt. Each names its actor and
a reason, and its first event says who did it and why."""

from __future__ import annotations

from typing import Any

from coordinator.domain import commands as c
from coordinator.domain.decide.decision import AttemptWrite, Context, Decision
from coordinator.domain.decide.helpers import (
    _attempt_change,
    _cancelled,
    _enqueue_new_attempt,
    _event,
    _finish_attempt,
    _invalid,
    _require,
    _run_update,
)
from coordinator.domain.decide.preconditions import (
    can_fail,
    can_pause,
    can_requeue,
    can_resolve,
    can_resume,
    lost_unsettled,
)
from coordinator.domain.model import Attempt, NewEvent, Run
from coordinator.domain.redaction import summary
from coordinator.domain.states import AttemptStatus, ObservedState, RunStatus
from kernel.errors import InvalidArgument
from kernel.records import replace


def _audited(cmd: c.OperatorCommand) -> str:
    """An operator command without a named actor or a reason is refused before anything."""
    if not cmd.actor.id:
        raise InvalidArgument("an operator command names its actor")
    reason = summary(cmd.reason.strip())
    if not reason:
        raise InvalidArgument("an operator command needs a reason")
    return reason


def _audit_event(
    type_: str, cmd: c.OperatorCommand, reason: str, attempt_id: str | None, **payload: Any
) -> NewEvent:
    return _event(type_, cmd.actor, attempt_id, reason=reason, operator=cmd.actor.id, **payload)


def _pause(cmd: c.PauseRun, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    reason = _audited(cmd)
    _require(can_pause(run, attempt), "pause (only a queued run)", run, attempt)
    events = [
        _audit_event(
            "run.paused", cmd, reason, run.current_attempt_id, from_status=run.status.value
        )
    ]
    return _run_update(run, ctx, events, attempt, status=RunStatus.PAUSED)


def _resume(cmd: c.ResumeRun, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    reason = _audited(cmd)
    _require(can_resume(run, attempt), "resume (only a paused run)", run, attempt)
    events = [
        _audit_event(
            "run.resumed", cmd, reason, run.current_attempt_id, from_status=run.status.value
        ),
        _event(
            "run.queued",
            cmd.actor,
            run.current_attempt_id,
            attempt_no=attempt.attempt_no if attempt else None,
        ),
    ]
    # queued_at_ms stays: a resumed run keeps its place in the queue.
    return _run_update(run, ctx, events, attempt, status=RunStatus.QUEUED)


def _fail_run(cmd: c.FailRun, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    reason = _audited(cmd)
    _require(
        can_fail(run, attempt),
        "fail by hand (only a queued, paused or dead-lettered run that is not running)",
        run,
        attempt,
    )
    events = [
        _audit_event(
            "run.failed_by_operator",
            cmd,
            reason,
            run.current_attempt_id,
            from_status=run.status.value,
        )
    ]
    ended = None
    if attempt is not None and attempt.status is AttemptStatus.QUEUED:
        # The attempt never started: it is cancelled, not failed; the run carries the failure.
        # Not _finish_attempt: a queued attempt holds no claim, and this write has always
        # left the lease columns as they are.
        ended = _attempt_change(
            attempt,
            ctx,
            status=AttemptStatus.CANCELLED,
            termination_reason="run_failed_by_operator",
            finished_at_ms=ctx.now_ms,
        )
        events.append(
            _event("attempt.cancelled", cmd.actor, attempt.id, reason="run_failed_by_operator")
        )
    events.append(_event("run.failed", cmd.actor, run.current_attempt_id, reason=reason))
    return _run_update(
        run,
        ctx,
        events,
        ended or attempt,
        AttemptWrite.UPDATE if ended is not None else None,
        attempt if ended is not None else None,
        status=RunStatus.FAILED,
        finished_at_ms=ctx.now_ms,
        error_code="failed_by_operator",
        error_summary=reason,
    )


def _requeue(cmd: c.Requeue, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    reason = _audited(cmd)
    _require(can_requeue(run, attempt), "requeue (only a dead-lettered run)", run, attempt)
    events = [
        _audit_event(
            "run.requeued", cmd, reason, run.current_attempt_id, from_status=run.status.value
        )
    ]
    if attempt is not None and attempt.status is AttemptStatus.QUEUED:
        events.append(_event("run.queued", cmd.actor, attempt.id, attempt_no=attempt.attempt_no))
        return _run_update(
            run,
            ctx,
            events,
            attempt,
            status=RunStatus.QUEUED,
            recovery_count=0,
            error_code=None,
            error_summary=None,
        )
    decision = _enqueue_new_attempt(run, attempt, ctx, cmd.actor, events)
    return replace(
        decision,
        run=replace(decision.run, recovery_count=0, error_code=None, error_summary=None),
    )


_RESOLVED_ATTEMPT = {
    c.ResolveAs.SUCCEEDED: AttemptStatus.SUCCEEDED,
    c.ResolveAs.FAILED: AttemptStatus.FAILED,
    c.ResolveAs.NOT_STARTED: AttemptStatus.LOST,
}
_RESOLVED_RUN = {
    c.ResolveAs.SUCCEEDED: RunStatus.SUCCEEDED,
    c.ResolveAs.FAILED: RunStatus.FAILED,
    c.ResolveAs.NOT_STARTED: RunStatus.LOST,
}


def _resolve(cmd: c.Resolve, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    reason = _audited(cmd)
    lost = lost_unsettled(run, attempt)
    _require(
        can_resolve(run, attempt),
        "resolve (only an unknown, lost or stuck attempt)",
        run,
        attempt,
    )
    assert attempt is not None
    as_ = cmd.resolved_as
    if as_ is c.ResolveAs.NOT_STARTED and attempt.observed_state is ObservedState.RUNNING:
        raise _invalid(
            "resolve as not started an attempt the runtime reported running", run, attempt
        )
    events = [
        _audit_event(
            "run.resolved",
            cmd,
            reason,
            attempt.id,
            resolved_as=as_.value,
            from_status=run.status.value,
        )
    ]
    if lost:
        # The lost attempt is finished and stays as it is; only the run moves on.
        if as_ is c.ResolveAs.NOT_STARTED:
            return _enqueue_new_attempt(run, attempt, ctx, cmd.actor, events)
        target = _RESOLVED_RUN[as_]
        events.append(_event(f"run.{target.value}", cmd.actor, attempt.id, reason=reason))
        return _run_update(
            run,
            ctx,
            events,
            attempt,
            status=target,
            finished_at_ms=ctx.now_ms,
            error_code=None if target is RunStatus.SUCCEEDED else "resolved_by_operator",
            error_summary=None if target is RunStatus.SUCCEEDED else reason,
        )
    status = _RESOLVED_ATTEMPT[as_]
    termination = f"resolved_{as_.value}_by_operator"
    resolved = _finish_attempt(
        attempt,
        ctx,
        status,
        termination,
        error_code=None if status is AttemptStatus.SUCCEEDED else "resolved_by_operator",
    )
    events.append(_event(f"attempt.{status.value}", cmd.actor, attempt.id, reason=termination))
    if run.cancel_requested_at_ms is not None:
        # The cancel committed first: whatever the attempt did, the run ends cancelled.
        events.append(_event("run.cancelled", cmd.actor, attempt.id, reason=termination))
        return _cancelled(run, ctx, events, resolved, attempt)
    target = _RESOLVED_RUN[as_]
    events.append(_event(f"run.{target.value}", cmd.actor, attempt.id, reason=reason))
    changes: dict[str, Any] = {"status": target}
    if target.terminal:
        changes.update(
            finished_at_ms=ctx.now_ms,
            error_code=None if target is RunStatus.SUCCEEDED else "resolved_by_operator",
            error_summary=None if target is RunStatus.SUCCEEDED else reason,
        )
    else:
        changes.update(error_code="resolved_not_started")
    return _run_update(run, ctx, events, resolved, AttemptWrite.UPDATE, attempt, **changes)
