"""The pieces every handler shares: events, the ``InvalidTransition`` a handler raises, the
checked run update, the attempt changes more than one command makes (a new attempt, back
to the queue, finished), and the dead-letter bound every recovery checks first.

``_run_update`` re-checks the run and attempt transition tables for every update a handler
decides, so a handler bug surfaces as ``InvalidTransition`` instead of a bad write.
"""

from __future__ import annotations

from typing import Any

from coordinator.domain.decide.decision import AttemptWrite, Context, Decision, Outcome, RunWrite
from coordinator.domain.model import Actor, Attempt, NewEvent, Run, runtime_task_id_for
from coordinator.domain.redaction import clean_payload
from coordinator.domain.rules import attempt_transition_allowed, run_transition_allowed
from coordinator.domain.states import AttemptStatus, ObservedState, RunStatus, SyncState
from kernel.errors import InvalidTransition
from kernel.records import replace


def _event(type_: str, actor: Actor, attempt_id: str | None = None, **payload: Any) -> NewEvent:
    return NewEvent(type=type_, actor=actor, attempt_id=attempt_id, payload=clean_payload(payload))


def _invalid(what: str, run: Run, attempt: Attempt | None) -> InvalidTransition:
    attempt_state = attempt.status.value if attempt else "none"
    return InvalidTransition(
        f"cannot {what}: run {run.id} is {run.status.value}, its attempt is {attempt_state}",
        run_id=run.id,
        run_status=run.status.value,
        attempt_status=attempt_state,
    )


def _require(ok: bool, what: str, run: Run, attempt: Attempt | None) -> None:
    if not ok:
        raise _invalid(what, run, attempt)


def _run_update(
    run: Run,
    ctx: Context,
    events: list[NewEvent],
    attempt: Attempt | None = None,
    attempt_write: AttemptWrite | None = None,
    previous_attempt: Attempt | None = None,
    **changes: Any,
) -> Decision:
    new_status = changes.get("status", run.status)
    if not run_transition_allowed(run.status, new_status):  # guards the handlers themselves
        raise _invalid(f"move to {new_status.value}", run, attempt)
    if attempt_write is AttemptWrite.UPDATE:
        assert attempt is not None and previous_attempt is not None
        if not attempt_transition_allowed(previous_attempt.status, attempt.status):
            raise _invalid(f"move the attempt to {attempt.status.value}", run, previous_attempt)
    updated = replace(run, version=run.version + 1, updated_at_ms=ctx.now_ms, **changes)
    return Decision(
        outcome=Outcome.APPLIED,
        run=updated,
        run_write=RunWrite.UPDATE,
        expected_version=run.version,
        attempt=attempt,
        attempt_write=attempt_write,
        attempt_expected_status=previous_attempt.status if previous_attempt else None,
        attempt_expected_seq=previous_attempt.last_event_seq if previous_attempt else None,
        events=tuple(events),
        lease_written=_lease_changed(previous_attempt, attempt),
    )


def _lease_changed(before: Attempt | None, after: Attempt | None) -> bool:
    if before is None or after is None:
        return False
    return (before.lease_token, before.lease_expires_at_ms) != (
        after.lease_token,
        after.lease_expires_at_ms,
    )


def _cancelled(
    run: Run,
    ctx: Context,
    events: list[NewEvent],
    attempt: Attempt | None,
    previous_attempt: Attempt | None,
    **changes: Any,
) -> Decision:
    """The run ends cancelled (with the attempt's change, when there is one)."""
    return _run_update(
        run,
        ctx,
        events,
        attempt,
        AttemptWrite.UPDATE if attempt is not None else None,
        previous_attempt,
        status=RunStatus.CANCELLED,
        finished_at_ms=ctx.now_ms,
        error_code="cancelled_by_user",
        **changes,
    )


def _live_after_fence(attempt: Attempt | None) -> bool:
    """A Start may have reached the runtime and no result has come back."""
    return (
        attempt is not None
        and attempt.fenced
        and attempt.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING)
    )


def _attempt_change(attempt: Attempt, ctx: Context, **changes: Any) -> Attempt:
    return replace(attempt, updated_at_ms=ctx.now_ms, **changes)


def _finish_attempt(
    attempt: Attempt, ctx: Context, status: AttemptStatus, reason: str, **changes: Any
) -> Attempt:
    """The attempt ends in the terminal ``status`` for ``reason``, now. Its lease is cleared:
    no heartbeat renews, and no dispatcher acts on, a finished attempt's claim."""
    return _attempt_change(
        attempt,
        ctx,
        status=status,
        termination_reason=reason,
        lease_token=None,
        lease_expires_at_ms=None,
        finished_at_ms=ctx.now_ms,
        **changes,
    )


def _new_attempt(run: Run, ctx: Context, previous: Attempt | None) -> Attempt:
    attempt_id = ctx.new_id()
    return Attempt(
        id=attempt_id,
        run_id=run.id,
        attempt_no=(previous.attempt_no + 1) if previous else 1,
        previous_attempt_id=previous.id if previous else None,
        owner_id=run.owner_id,
        agent_id=run.agent_id,
        execution_scope=run.execution_scope,
        runtime_task_id=runtime_task_id_for(attempt_id),
        status=AttemptStatus.QUEUED,
        observed_state=ObservedState.UNCONFIRMED,
        sync_state=SyncState.PENDING,
        created_at_ms=ctx.now_ms,
        updated_at_ms=ctx.now_ms,
    )


def _enqueue_new_attempt(
    run: Run, previous: Attempt | None, ctx: Context, actor: Actor, events: list[NewEvent]
) -> Decision:
    """run -> queued with a fresh attempt row (approval, automatic retry)."""
    attempt = _new_attempt(run, ctx, previous)
    events.append(
        _event(
            "run.queued",
            actor,
            attempt.id,
            attempt_no=attempt.attempt_no,
            previous_attempt_id=attempt.previous_attempt_id,
            runtime_task_id=attempt.runtime_task_id,
        )
    )
    decision = _run_update(
        run,
        ctx,
        events,
        status=RunStatus.QUEUED,
        queued_at_ms=ctx.now_ms,
        current_attempt_id=attempt.id,
        attempt_count=run.attempt_count + 1,
    )
    return replace(decision, attempt=attempt, attempt_write=AttemptWrite.INSERT)


def _dead_letter_if_exhausted(
    run: Run,
    max_recoveries: int,
    actor: Actor,
    attempt: Attempt,
    events: list[NewEvent],
    code: str = "too_many_recoveries",
    cause: str = "",
) -> dict[str, Any] | None:
    """Past ``max_recoveries`` the run is parked for a person instead of recovered again
    (endless requeueing hides a run that can never succeed); None: recover as usual.
    ``cause``: what made this recovery necessary, first in the summary (a refusal)."""
    if max_recoveries <= 0 or run.recovery_count < max_recoveries:
        return None
    summary_text = (
        f"recovered {run.recovery_count} times (limit {max_recoveries}); "
        "an operator must requeue or fail it"
    )
    events.append(
        _event(
            "run.dead_lettered",
            actor,
            attempt.id,
            reason=code,
            recoveries=run.recovery_count,
            max_recoveries=max_recoveries,
        )
    )
    return {
        "status": RunStatus.DEAD_LETTER,
        "error_code": code,
        "error_summary": f"{cause}; {summary_text}" if cause else summary_text,
    }


def _back_to_queue(attempt: Attempt, ctx: Context) -> Attempt:
    """The same row, same attempt_no: nothing ran, so nothing is consumed."""
    return _attempt_change(
        attempt,
        ctx,
        status=AttemptStatus.QUEUED,
        claimed_at_ms=None,
        start_requested_at_ms=None,
        runtime_instance_id=None,
        runtime_device_id=None,
        lease_token=None,
        lease_expires_at_ms=None,
        callback_token_hash=None,
        callback_token_expires_at_ms=None,
        observed_state=ObservedState.UNCONFIRMED,
        sync_state=SyncState.PENDING,
    )


def _the_started_attempt(attempt_id: str, run: Run, attempt: Attempt | None, what: str) -> Attempt:
    """The run's started, unfinished attempt, which must be the one named."""
    _require(
        _live_after_fence(attempt)
        and not run.status.terminal
        and attempt is not None
        and attempt.id == attempt_id,
        f"{what} (only for the run's started attempt)",
        run,
        attempt,
    )
    assert attempt is not None
    return attempt


def _recorded_only(run: Run, attempt: Attempt | None, event: NewEvent) -> Decision:
    """Evidence that changes nothing: only the event is written (the run's sequence moves)."""
    return Decision(
        outcome=Outcome.IGNORED,
        run=run,
        run_write=RunWrite.EVENTS_ONLY,
        attempt=attempt,
        events=(event,),
    )


def _cancelled_before_start(
    run: Run, attempt: Attempt, ctx: Context, actor: Actor, events: list[NewEvent]
) -> Decision:
    """A fenced attempt that provably never started, with a cancel requested: the intent is
    fulfilled, the attempt and the run end cancelled."""
    cancelled = _finish_attempt(attempt, ctx, AttemptStatus.CANCELLED, "cancelled_before_start")
    events.append(_event("attempt.cancelled", actor, attempt.id, reason="cancelled_before_start"))
    events.append(_event("run.cancelled", actor, attempt.id, reason="cancelled_before_start"))
    return _cancelled(run, ctx, events, cancelled, attempt)


def _requeued_as_recovery(
    run: Run,
    attempt: Attempt,
    ctx: Context,
    actor: Actor,
    events: list[NewEvent],
    max_recoveries: int,
    **dead_letter: str,
) -> Decision:
    """A fenced attempt that provably never started goes back to the queue on the same row,
    counted as a recovery; past ``max_recoveries`` the run is dead-lettered instead
    (``dead_letter``: the code and cause ``_dead_letter_if_exhausted`` records)."""
    requeued = _back_to_queue(attempt, ctx)
    dead = _dead_letter_if_exhausted(run, max_recoveries, actor, attempt, events, **dead_letter)
    if dead is not None:
        return _run_update(run, ctx, events, requeued, AttemptWrite.UPDATE, attempt, **dead)
    events.append(_event("run.queued", actor, attempt.id, attempt_no=attempt.attempt_no))
    return _run_update(
        run,
        ctx,
        events,
        requeued,
        AttemptWrite.UPDATE,
        attempt,
        status=RunStatus.QUEUED,
        recovery_count=run.recovery_count + 1,
    )
