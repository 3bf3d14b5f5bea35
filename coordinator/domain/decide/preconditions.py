"""What a run's current state allows a person to do: one predicate per command, and the list
every surface offers (``allowed_commands``).

The handlers (``create``, ``cancel``, ``operator``) check these same predicates before they
decide anything, so what the Run resource says is allowed and what the command accepts
cannot disagree (tests/unit/test_allowed_commands.py holds both to every reachable state).
"Allowed" is about the run's state only: the caller's credential (an operator command needs
an operator token) and a version that moved in between are still checked when it is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from coordinator.domain.decide.helpers import _live_after_fence
from coordinator.domain.model import Attempt, Run
from coordinator.domain.rules import run_transition_allowed
from coordinator.domain.states import AttemptStatus, ObservedState, RunStatus, SyncState


class RunCommandName(StrEnum):
    """The commands a person sends to a run, named as the REST custom methods (``:pause``)."""

    CANCEL = "cancel"
    RETRY = "retry"
    APPROVE = "approve"
    RESOLVE = "resolve"
    PAUSE = "pause"
    RESUME = "resume"
    REQUEUE = "requeue"
    FAIL = "fail"


def can_cancel(run: Run, attempt: Attempt | None) -> bool:
    """Not ended and not asked already (otherwise the request changes nothing)."""
    return not run.status.terminal and run.cancel_requested_at_ms is None


def can_retry(run: Run, attempt: Attempt | None) -> bool:
    """A new run from an ended one that did not succeed."""
    return run.status in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT)


def can_approve(run: Run, attempt: Attempt | None) -> bool:
    return run.status is RunStatus.PENDING_APPROVAL


def can_pause(run: Run, attempt: Attempt | None) -> bool:
    return run.status is RunStatus.QUEUED


def can_resume(run: Run, attempt: Attempt | None) -> bool:
    return run.status is RunStatus.PAUSED


def can_requeue(run: Run, attempt: Attempt | None) -> bool:
    return run.status is RunStatus.DEAD_LETTER


def can_fail(run: Run, attempt: Attempt | None) -> bool:
    """Queued, paused or dead-lettered, and nothing of it is running."""
    return run.status in (RunStatus.QUEUED, RunStatus.PAUSED, RunStatus.DEAD_LETTER) and (
        attempt is None or attempt.status in (AttemptStatus.QUEUED, AttemptStatus.LOST)
    )


def lost_unsettled(run: Run, attempt: Attempt | None) -> bool:
    """The runtime lost the attempt and no one has settled the run yet."""
    return (
        run.status is RunStatus.LOST
        and attempt is not None
        and attempt.status is AttemptStatus.LOST
        and run.cancel_requested_at_ms is None
    )


def unknown(run: Run, attempt: Attempt | None) -> bool:
    """Started, unfinished, and no evidence since: display ``unknown``."""
    return (
        _live_after_fence(attempt)
        and attempt is not None
        and attempt.sync_state is SyncState.STALE
        and not run.status.terminal
    )


def stuck(run: Run, attempt: Attempt | None) -> bool:
    """Started and unfinished with no evidence that it runs (starting: the Start was never
    answered; waiting_runtime: accepted, never reported running): a person may settle it."""
    return (
        _live_after_fence(attempt)
        and attempt is not None
        and attempt.observed_state in (ObservedState.UNCONFIRMED, ObservedState.ACCEPTED)
        and not run.status.terminal
    )


def can_resolve(run: Run, attempt: Attempt | None) -> bool:
    """An unknown, lost or stuck attempt, of a run that may end where the answer a person
    can always give (failed) takes it: cancelled when a cancel was asked for, else failed
    (waiting_approval may not end failed, so no answer could settle it). Resolving as not
    started is still refused for an attempt the runtime reported running: that is about the
    answer, not the state."""
    ends = RunStatus.CANCELLED if run.cancel_requested_at_ms is not None else RunStatus.FAILED
    return (
        lost_unsettled(run, attempt) or unknown(run, attempt) or stuck(run, attempt)
    ) and run_transition_allowed(run.status, ends)


#: In the order a surface lists them: the ordinary commands, then the operator's.
PRECONDITIONS: dict[RunCommandName, Callable[[Run, Attempt | None], bool]] = {
    RunCommandName.CANCEL: can_cancel,
    RunCommandName.RETRY: can_retry,
    RunCommandName.APPROVE: can_approve,
    RunCommandName.RESOLVE: can_resolve,
    RunCommandName.PAUSE: can_pause,
    RunCommandName.RESUME: can_resume,
    RunCommandName.REQUEUE: can_requeue,
    RunCommandName.FAIL: can_fail,
}


def allowed_commands(run: Run, attempt: Attempt | None) -> tuple[RunCommandName, ...]:
    """The commands ``run`` (with its current ``attempt``) accepts now, in a fixed order."""
    return tuple(name for name, allowed in PRECONDITIONS.items() if allowed(run, attempt))
