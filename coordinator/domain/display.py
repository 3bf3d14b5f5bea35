"""The display state: one pure function of a run and its current attempt.

Every surface (gRPC, REST, dashboard, CLI) calls this and nothing else, so they can never
disagree. The priority is fixed; see docs/state-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain.model import Attempt, Run
from coordinator.domain.states import AttemptStatus, DisplayState, ObservedState, SyncState

_RUN_STATUS_DISPLAY = {
    "pending_approval": DisplayState.PENDING_APPROVAL,
    "queued": DisplayState.QUEUED,
    "dispatching": DisplayState.STARTING,
    "running": DisplayState.RUNNING,
    "waiting_approval": DisplayState.WAITING_APPROVAL,
    "retry_wait": DisplayState.RETRY_WAIT,
    "lost": DisplayState.LOST,
    "succeeded": DisplayState.SUCCEEDED,
    "failed": DisplayState.FAILED,
    "cancelled": DisplayState.CANCELLED,
    "timed_out": DisplayState.TIMED_OUT,
    "paused": DisplayState.PAUSED,
    "dead_letter": DisplayState.DEAD_LETTER,
}


_WAITING_FOR = {
    DisplayState.QUEUED: "waiting for a runtime with a free slot",
    DisplayState.PENDING_APPROVAL: "waiting for a person to approve it",
    DisplayState.WAITING_APPROVAL: "the running task waits for a person's approval",
    DisplayState.RETRY_WAIT: "the last attempt failed; a new attempt will be queued",
    DisplayState.LOST: "the runtime lost the task; waiting for the retry policy or a person",
    DisplayState.PAUSED: "paused by an operator; never claimed until resumed",
    DisplayState.DEAD_LETTER: "recovered too many times; waiting for an operator to requeue "
    "or fail it",
}


@dataclass(frozen=True, slots=True)
class Display:
    state: DisplayState
    reason: str
    since_ms: int | None


def display_state(run: Run, attempt: Attempt | None) -> DisplayState:
    return explain(run, attempt).state


def explain(run: Run, attempt: Attempt | None) -> Display:
    """The display state with a reason a person can read and the time it holds since."""
    # Only the run's current, unfinished attempt speaks for it: a finished attempt's last
    # evidence (observed running, a stale sync) must not hide a lost or retry_wait run.
    live = (
        attempt
        if attempt is not None
        and attempt.id == run.current_attempt_id
        and not attempt.status.terminal
        else None
    )
    fenced = live is not None and live.fenced
    if run.status.terminal:
        return Display(
            _RUN_STATUS_DISPLAY[run.status.value],
            run.error_code or run.status.value,
            run.finished_at_ms,
        )
    if run.cancel_requested_at_ms is not None and fenced:
        return Display(
            DisplayState.CANCELLING,
            "cancel requested; waiting for the runtime to confirm the process stopped",
            run.cancel_requested_at_ms,
        )
    if live is not None and fenced and live.sync_state is SyncState.STALE:
        why = live.sync_reason or "no evidence from the runtime since the start was sent"
        return Display(
            DisplayState.UNKNOWN,
            f"{why}; capacity is held",
            live.observed_at_ms or live.start_requested_at_ms,
        )
    if live is not None and fenced and live.observed_state is ObservedState.RUNNING:
        return Display(DisplayState.RUNNING, "the runtime reported it running", live.observed_at_ms)
    if live is not None and fenced and live.observed_state is ObservedState.ACCEPTED:
        return Display(
            DisplayState.WAITING_RUNTIME,
            # what is known: accepted, not running; whether it waits for a slot is the
            # runtime's observation, not this attempt's
            "accepted by the runtime, not yet running",
            live.observed_at_ms,
        )
    if live is not None and live.status in (AttemptStatus.CLAIMED, AttemptStatus.STARTING):
        reason = "start sent to the runtime" if fenced else "claimed; start not sent yet"
        return Display(
            DisplayState.STARTING, reason, live.start_requested_at_ms or live.claimed_at_ms
        )
    state = _RUN_STATUS_DISPLAY[run.status.value]
    reason = _WAITING_FOR.get(state, run.status.value)
    if state is DisplayState.DEAD_LETTER and run.error_summary:
        reason = run.error_summary
    return Display(state, reason, run.updated_at_ms)
