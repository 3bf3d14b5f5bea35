"""The transition function: (command, current run, attempt) -> decision. Pure, no I/O.

A decision names the rows to write and the events to append; the store writes all of it in
one transaction with compare-and-set on the run version and the attempt status + sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from coordinator.domain import commands as c
from coordinator.domain import output
from coordinator.domain.model import Actor, Attempt, NewEvent, Run, runtime_task_id_for
from coordinator.domain.redaction import clean_payload, summary
from coordinator.domain.rules import attempt_transition_allowed, run_transition_allowed
from coordinator.domain.states import (
    ActorType,
    AttemptStatus,
    ObservedState,
    RunStatus,
    SyncState,
)
from kernel.errors import (
    InvalidArgument,
    InvalidTransition,
    RuntimeTaskMismatch,
    VersionConflict,
)


class Outcome(StrEnum):
    APPLIED = "applied"
    ALREADY_REQUESTED = "already_requested"
    ALREADY_TERMINAL = "already_terminal"
    IGNORED = "ignored"  # a late, duplicate or out-of-order runtime event, recorded only


class RunWrite(StrEnum):
    INSERT = "insert"
    UPDATE = "update"  # compare-and-set on ``expected_version``
    EVENTS_ONLY = "events_only"  # the run row is unchanged apart from its event sequence
    NONE = "none"


class AttemptWrite(StrEnum):
    INSERT = "insert"
    UPDATE = "update"  # compare-and-set on the expected status and event sequence


@dataclass(frozen=True, slots=True)
class Context:
    now_ms: int
    new_id: Callable[[], str]
    new_token: Callable[[], str]
    output: output.OutputPolicy = output.DEFAULT_OUTPUT_POLICY


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    run: Run
    run_write: RunWrite
    expected_version: int | None = None
    attempt: Attempt | None = None
    attempt_write: AttemptWrite | None = None
    attempt_expected_status: AttemptStatus | None = None
    attempt_expected_seq: int | None = None
    events: tuple[NewEvent, ...] = ()
    #: The attempt update changes the lease (claim, release, finish); otherwise the store
    #: keeps the lease a concurrent heartbeat renewal may have extended.
    lease_written: bool = False
    #: Output to append to the attempt's output store, in the same transaction.
    output: tuple[output.Stored, ...] = ()


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


# -- helpers -------------------------------------------------------------------------------


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


# -- run creation ----------------------------------------------------------------------------


def _create(spec: c.RunSpec, ctx: Context, retry_of: Run | None) -> Decision:
    run_id = ctx.new_id()
    status = RunStatus.PENDING_APPROVAL if spec.requires_approval else RunStatus.QUEUED
    run = Run(
        id=run_id,
        project_id=spec.project_id,
        owner_id=spec.owner_id,
        task_id=spec.task_id,
        task_revision=spec.task_revision,
        agent_id=spec.agent_id,
        execution_scope=spec.execution_scope,
        scope_policy=spec.scope_policy,
        trigger_type=spec.trigger_type,
        trigger_id=spec.trigger_id,
        idempotency_key=spec.idempotency_key,
        retry_of_run_id=retry_of.id if retry_of else None,
        priority=spec.priority,
        max_attempts=spec.max_attempts,
        idempotent=spec.idempotent,
        run_now=spec.run_now,
        pinned_runtime_instance_id=spec.pinned_runtime_instance_id,
        required_labels=spec.required_labels,
        spec=spec.spec,
        status=status,
        version=1,
        event_sequence=0,
        current_attempt_id=None,
        attempt_count=0,
        created_by=spec.created_by.id,
        created_at_ms=ctx.now_ms,
        updated_at_ms=ctx.now_ms,
    )
    actor = spec.created_by
    events = [
        _event(
            "run.created",
            actor,
            to_status=status.value,
            retry_of_run_id=run.retry_of_run_id,
            trace_parent=spec.trace_parent or None,
        )
    ]
    attempt = None
    if status is RunStatus.QUEUED:
        attempt = _new_attempt(run, ctx, None)
        run = replace(run, current_attempt_id=attempt.id, attempt_count=1, queued_at_ms=ctx.now_ms)
        events.append(
            _event(
                "run.queued",
                actor,
                attempt.id,
                attempt_no=1,
                runtime_task_id=attempt.runtime_task_id,
            )
        )
    return Decision(
        outcome=Outcome.APPLIED,
        run=run,
        run_write=RunWrite.INSERT,
        attempt=attempt,
        attempt_write=AttemptWrite.INSERT if attempt else None,
        events=tuple(events),
    )


def _manual_retry(cmd: c.ManualRetry, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    _require(
        run.status in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT),
        "retry by hand (only failed, cancelled or timed out runs)",
        run,
        attempt,
    )
    spec = c.RunSpec(
        project_id=run.project_id,
        owner_id=run.owner_id,
        task_id=run.task_id,
        created_by=cmd.actor,
        task_revision=run.task_revision,
        agent_id=run.agent_id,
        execution_scope=run.execution_scope,
        scope_policy=run.scope_policy,
        trigger_type="manual_retry",
        trigger_id=run.id,
        priority=run.priority,
        max_attempts=run.max_attempts,
        idempotent=run.idempotent,
        pinned_runtime_instance_id=run.pinned_runtime_instance_id,
        required_labels=run.required_labels,
        spec=run.spec,
    )
    return _create(spec, ctx, retry_of=run)


# -- run commands ----------------------------------------------------------------------------


def _approve(cmd: c.Approve, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    _require(run.status is RunStatus.PENDING_APPROVAL, "approve", run, attempt)
    events = [_event("run.approved", cmd.actor, from_status=run.status.value)]
    return _enqueue_new_attempt(run, None, ctx, cmd.actor, events)


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


def _request_cancel(
    cmd: c.RequestCancel, run: Run, attempt: Attempt | None, ctx: Context
) -> Decision:
    if run.status.terminal:
        return Decision(
            outcome=Outcome.ALREADY_TERMINAL, run=run, run_write=RunWrite.NONE, attempt=attempt
        )
    if run.cancel_requested_at_ms is not None:
        return Decision(
            outcome=Outcome.ALREADY_REQUESTED, run=run, run_write=RunWrite.NONE, attempt=attempt
        )
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
        cancelled_attempt = _attempt_change(
            attempt,
            ctx,
            status=AttemptStatus.CANCELLED,
            cancel_requested_at_ms=ctx.now_ms,
            termination_reason="cancelled_before_start",
            lease_token=None,
            lease_expires_at_ms=None,
            finished_at_ms=ctx.now_ms,
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


def _mark_lost(cmd: c.MarkLost, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    _require(
        _live_after_fence(attempt) and not run.status.terminal,
        "declare the attempt lost (only a started attempt can be lost)",
        run,
        attempt,
    )
    assert attempt is not None
    lost = _attempt_change(
        attempt,
        ctx,
        status=AttemptStatus.LOST,
        termination_reason=cmd.reason,
        lease_token=None,
        lease_expires_at_ms=None,
        finished_at_ms=ctx.now_ms,
    )
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
SYNC_REASON_MAX = 512


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


def _recorded_only(run: Run, attempt: Attempt | None, event: NewEvent) -> Decision:
    """Evidence that changes nothing: only the event is written (the run's sequence moves)."""
    return Decision(
        outcome=Outcome.IGNORED,
        run=run,
        run_write=RunWrite.EVENTS_ONLY,
        attempt=attempt,
        events=(event,),
    )


# -- operator commands (audited escape hatches) ------------------------------------------------


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
    _require(run.status is RunStatus.QUEUED, "pause (only a queued run)", run, attempt)
    events = [
        _audit_event(
            "run.paused", cmd, reason, run.current_attempt_id, from_status=run.status.value
        )
    ]
    return _run_update(run, ctx, events, attempt, status=RunStatus.PAUSED)


def _resume(cmd: c.ResumeRun, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    reason = _audited(cmd)
    _require(run.status is RunStatus.PAUSED, "resume (only a paused run)", run, attempt)
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
        run.status in (RunStatus.QUEUED, RunStatus.PAUSED, RunStatus.DEAD_LETTER)
        and (attempt is None or attempt.status in (AttemptStatus.QUEUED, AttemptStatus.LOST)),
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
    _require(
        run.status is RunStatus.DEAD_LETTER, "requeue (only a dead-lettered run)", run, attempt
    )
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


def _unknown(run: Run, attempt: Attempt | None) -> bool:
    """Started, unfinished, and no evidence since: display ``unknown``."""
    return (
        _live_after_fence(attempt)
        and attempt is not None
        and attempt.sync_state is SyncState.STALE
        and not run.status.terminal
    )


def _stuck(run: Run, attempt: Attempt | None) -> bool:
    """Started and unfinished with no evidence that it runs (starting: the Start was never
    answered; waiting_runtime: accepted, never reported running): a person may settle it."""
    return (
        _live_after_fence(attempt)
        and attempt is not None
        and attempt.observed_state in (ObservedState.UNCONFIRMED, ObservedState.ACCEPTED)
        and not run.status.terminal
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
    lost = (
        run.status is RunStatus.LOST
        and attempt is not None
        and attempt.status is AttemptStatus.LOST
        and run.cancel_requested_at_ms is None
    )
    _require(
        lost or _unknown(run, attempt) or _stuck(run, attempt),
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
    resolved = _attempt_change(
        attempt,
        ctx,
        status=status,
        termination_reason=termination,
        error_code=None if status is AttemptStatus.SUCCEEDED else "resolved_by_operator",
        lease_token=None,
        lease_expires_at_ms=None,
        finished_at_ms=ctx.now_ms,
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
}


# -- runtime evidence ------------------------------------------------------------------------


def _runtime(cmd: c.RuntimeCommand, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
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
        return _refused_and_cancelled(cmd, run, attempt, ctx, events)
    if cmd.permanent:
        return _refused_for_good(cmd, run, attempt, ctx, events, f"refused by {runtime}: {reason}")
    requeued = _back_to_queue(attempt, ctx)
    # a refusal is counted like a recovery, and bounded the same way
    dead = _dead_letter_if_exhausted(
        run,
        cmd.max_refusals,
        cmd.actor,
        attempt,
        events,
        code="refused_too_often",
        cause=f"refused by {runtime}: {reason}",
    )
    if dead is not None:
        return _run_update(run, ctx, events, requeued, AttemptWrite.UPDATE, attempt, **dead)
    events.append(_event("run.queued", cmd.actor, attempt.id, attempt_no=attempt.attempt_no))
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


def _refused_and_cancelled(
    cmd: c.DispatchRejected, run: Run, attempt: Attempt, ctx: Context, events: list[NewEvent]
) -> Decision:
    cancelled = _attempt_change(
        attempt,
        ctx,
        status=AttemptStatus.CANCELLED,
        lease_token=None,
        lease_expires_at_ms=None,
        finished_at_ms=ctx.now_ms,
        termination_reason="cancelled_before_start",
    )
    events.append(
        _event("attempt.cancelled", cmd.actor, attempt.id, reason="cancelled_before_start")
    )
    events.append(_event("run.cancelled", cmd.actor, attempt.id, reason="cancelled_before_start"))
    return _cancelled(run, ctx, events, cancelled, attempt)


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
    failed = _attempt_change(
        attempt,
        ctx,
        status=AttemptStatus.FAILED,
        lease_token=None,
        lease_expires_at_ms=None,
        finished_at_ms=ctx.now_ms,
        termination_reason="start_refused",
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
    finished = _evidence(
        attempt,
        cmd,
        ctx,
        **output.columns(flushed.state),
        status=attempt_status,
        observed_state=_OBSERVED_FOR_OUTCOME[outcome],
        exit_code=cmd.exit_code,
        error_code=error_code if attempt_status is not AttemptStatus.SUCCEEDED else None,
        error_summary=error_summary,
        termination_reason=termination,
        lease_token=None,
        lease_expires_at_ms=None,
        finished_at_ms=ctx.now_ms,
    )
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


_RUNTIME_HANDLERS: dict[type, Callable[[Any, Run, Attempt, Context], Decision]] = {
    c.DispatchRejected: _dispatch_rejected,
    c.RuntimeAccepted: _runtime_accepted,
    c.RuntimeRunning: _runtime_running,
    c.RuntimeResult: _runtime_result,
    c.RuntimeNote: _runtime_note,
    c.CancelConfirmed: _cancel_confirmed,
}


def chain(decisions: list[Decision]) -> Decision:
    """Fold consecutive decisions on one run into one write: the last state, every event,
    compare-and-set against the state before the first. ``decisions`` were decided one after
    another, each on the state the previous one left (runtime events of one attempt)."""
    first, last = decisions[0], decisions[-1]
    updates = [d for d in decisions if d.run_write is RunWrite.UPDATE]
    attempt_updates = [d for d in decisions if d.attempt_write is AttemptWrite.UPDATE]
    events = tuple(e for d in decisions for e in d.events)
    pieces = tuple(piece for d in decisions for piece in d.output)
    if not updates:
        return replace(last, events=events, output=pieces)
    head = attempt_updates[0] if attempt_updates else None
    return Decision(
        outcome=updates[-1].outcome,
        run=updates[-1].run,
        run_write=RunWrite.UPDATE,
        expected_version=updates[0].expected_version,
        attempt=attempt_updates[-1].attempt if attempt_updates else first.attempt,
        attempt_write=AttemptWrite.UPDATE if attempt_updates else None,
        attempt_expected_status=head.attempt_expected_status if head else None,
        attempt_expected_seq=head.attempt_expected_seq if head else None,
        events=events,
        lease_written=any(d.lease_written for d in decisions),
        output=pieces,
    )
