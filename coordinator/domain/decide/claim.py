"""Claim and fence: a dispatcher claims a queued attempt, releases the claim before the
start fence, or sets the fence (after which a Start may have reached the runtime); the
runtime's answer to the Start, and the dispatcher losing track of it (``DispatchUnknown``).
"""

from __future__ import annotations

from coordinator.domain import commands as c
from coordinator.domain.decide.decision import AttemptWrite, Context, Decision, Outcome, RunWrite
from coordinator.domain.decide.helpers import (
    _attempt_change,
    _back_to_queue,
    _dead_letter_if_exhausted,
    _event,
    _invalid,
    _live_after_fence,
    _require,
    _run_update,
    _the_started_attempt,
)
from coordinator.domain.model import Attempt, Run
from coordinator.domain.redaction import summary
from coordinator.domain.states import AttemptStatus, ObservedState, RunStatus, SyncState
from kernel.errors import InvalidArgument


def _claim(cmd: c.Claim, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    _require(
        run.status is RunStatus.QUEUED
        and attempt is not None
        and attempt.status is AttemptStatus.QUEUED,
        "claim",
        run,
        attempt,
    )
    assert attempt is not None
    if not cmd.runtime_instance_id:
        raise InvalidArgument("a claim names the runtime instance it is for")
    if run.pinned_runtime_instance_id not in (None, cmd.runtime_instance_id):
        raise _invalid(f"claim for runtime instance {cmd.runtime_instance_id}", run, attempt)
    lease_expires = ctx.now_ms + cmd.lease_ttl_ms
    claimed = _attempt_change(
        attempt,
        ctx,
        status=AttemptStatus.CLAIMED,
        claimed_at_ms=ctx.now_ms,
        runtime_instance_id=cmd.runtime_instance_id,
        runtime_device_id=cmd.runtime_device_id or None,
        lease_token=ctx.new_token(),
        lease_expires_at_ms=lease_expires,
    )
    events = [
        _event(
            "attempt.claimed",
            cmd.actor,
            attempt.id,
            runtime_instance_id=cmd.runtime_instance_id,
            runtime_device_id=cmd.runtime_device_id,
            lease_expires_at_ms=lease_expires,
        ),
        _event("run.dispatching", cmd.actor, attempt.id),
    ]
    return _run_update(
        run,
        ctx,
        events,
        claimed,
        AttemptWrite.UPDATE,
        attempt,
        status=RunStatus.DISPATCHING,
    )


def _check_lease(lease_token: str, run: Run, attempt: Attempt) -> None:
    """A dispatcher acts on a claim only with that claim's lease token: a stalled one whose
    claim was released and taken by another cannot fence or release the newer claim."""
    if lease_token and lease_token != attempt.lease_token:
        raise _invalid("act on a claim with another claim's lease token", run, attempt)


def _release(
    cmd: c.ReleaseBeforeFence, run: Run, attempt: Attempt | None, ctx: Context
) -> Decision:
    _require(
        attempt is not None and attempt.status is AttemptStatus.CLAIMED and not attempt.fenced,
        "release a claim (only before the start fence)",
        run,
        attempt,
    )
    assert attempt is not None
    _check_lease(cmd.lease_token, run, attempt)
    released = _back_to_queue(attempt, ctx)
    events = [_event("attempt.released", cmd.actor, attempt.id, reason=cmd.reason)]
    if cmd.recovery:
        dead = _dead_letter_if_exhausted(run, cmd.max_recoveries, cmd.actor, attempt, events)
        if dead is not None:
            return _run_update(run, ctx, events, released, AttemptWrite.UPDATE, attempt, **dead)
    events.append(_event("run.queued", cmd.actor, attempt.id, attempt_no=attempt.attempt_no))
    return _run_update(
        run,
        ctx,
        events,
        released,
        AttemptWrite.UPDATE,
        attempt,
        status=RunStatus.QUEUED,
        recovery_count=run.recovery_count + int(cmd.recovery),
    )


def _start_fence(cmd: c.StartFence, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    _require(
        run.status is RunStatus.DISPATCHING
        and attempt is not None
        and attempt.status is AttemptStatus.CLAIMED
        and run.cancel_requested_at_ms is None,
        "set the start fence",
        run,
        attempt,
    )
    assert attempt is not None
    _check_lease(cmd.lease_token, run, attempt)
    if not cmd.callback_token_hash:
        raise InvalidArgument("the start fence carries the callback token hash")
    fenced = _attempt_change(
        attempt,
        ctx,
        status=AttemptStatus.STARTING,
        start_requested_at_ms=ctx.now_ms,
        callback_token_hash=cmd.callback_token_hash,
        callback_token_expires_at_ms=ctx.now_ms + cmd.callback_token_ttl_ms,
    )
    events = [
        _event(
            "attempt.start_requested",
            cmd.actor,
            attempt.id,
            runtime_task_id=attempt.runtime_task_id,
            runtime_instance_id=attempt.runtime_instance_id,
        )
    ]
    return _run_update(run, ctx, events, fenced, AttemptWrite.UPDATE, attempt)


def _dispatch_unknown(
    cmd: c.DispatchUnknown, run: Run, attempt: Attempt | None, ctx: Context
) -> Decision:
    _require(
        _live_after_fence(attempt) and not run.status.terminal,
        "mark the runtime state unknown (only after the start fence)",
        run,
        attempt,
    )
    assert attempt is not None
    _require(
        not cmd.attempt_id or cmd.attempt_id == attempt.id,
        f"mark attempt {cmd.attempt_id} unknown (it is no longer the run's current attempt)",
        run,
        attempt,
    )
    if attempt.sync_state is SyncState.STALE:
        return Decision(
            outcome=Outcome.ALREADY_REQUESTED, run=run, run_write=RunWrite.NONE, attempt=attempt
        )
    explanation = summary(cmd.explanation) or cmd.reason
    stale = _attempt_change(
        attempt, ctx, sync_state=SyncState.STALE, sync_reason=explanation[:SYNC_REASON_MAX]
    )
    events = [
        _event(
            "attempt.sync_stale", cmd.actor, attempt.id, reason=cmd.reason, explanation=explanation
        )
    ]
    return _run_update(run, ctx, events, stale, AttemptWrite.UPDATE, attempt)


def _start_accepted(
    cmd: c.StartAccepted, run: Run, attempt: Attempt | None, ctx: Context
) -> Decision:
    attempt = _the_started_attempt(cmd.attempt_id, run, attempt, "record the acceptance")
    if attempt.observed_state is not ObservedState.UNCONFIRMED:
        return Decision(
            outcome=Outcome.ALREADY_REQUESTED, run=run, run_write=RunWrite.NONE, attempt=attempt
        )
    accepted = _attempt_change(
        attempt,
        ctx,
        observed_state=ObservedState.ACCEPTED,
        observed_at_ms=ctx.now_ms,
        sync_state=SyncState.IN_SYNC,
        sync_reason=None,
    )
    events = [_event("attempt.accepted", cmd.actor, attempt.id, source="start_result")]
    return _run_update(run, ctx, events, accepted, AttemptWrite.UPDATE, attempt)


SYNC_REASON_MAX = 512
