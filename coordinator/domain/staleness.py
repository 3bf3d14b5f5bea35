"""Why a started attempt turns `unknown`: what a heartbeat vouches for, and the sentence each
cause leaves for a person.

A heartbeat is not liveness (seed A §2, §10). It vouches only for the tasks the runtime lists
in it (``active_task_ids`` and ``queued_task_ids``): only those get their lease renewed. A
started attempt of that runtime instance that the heartbeat does not list, once past the
grace below, is *missing*: its sync goes stale with a reason that says so, and the runtime is
asked (Inspect). A runtime that lost a task (a whole worker died and came back on its state)
therefore can no longer keep it `running` by heartbeating.

The grace covers the one honest race: a heartbeat composed before the runtime accepted a Start
may arrive after it. An attempt the runtime has not confirmed yet is judged only after the
start timeout (until then the dispatcher waits for its answer); a confirmed one only when its
start fence and its last evidence are both older than ``grace_ms``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from coordinator.domain.model import Attempt
from coordinator.domain.states import ObservedState, SyncState

#: DispatchUnknown reason codes (recorded in the attempt.sync_stale event).
NOT_LISTED = "not_listed_by_runtime"
LEASE_LAPSED = "lease_expired_after_start"
START_UNANSWERED = "start_unanswered"


@dataclass(frozen=True, slots=True)
class Vouched:
    """What one heartbeat means for the started attempts of its runtime instance."""

    #: Attempts whose lease the heartbeat renews: listed, or not yet judged (grace).
    renew: tuple[str, ...]
    #: Attempts the runtime should list and does not: they turn unknown and are inspected.
    missing: tuple[Attempt, ...]


def vouch(
    started: Sequence[Attempt],
    listed: Collection[str],
    *,
    lists_queue: bool,
    now_ms: int,
    start_timeout_ms: int,
    grace_ms: int,
) -> Vouched:
    """Sort ``started`` (the instance's starting/running attempts) by the heartbeat that
    lists the runtime task ids ``listed``. ``lists_queue`` is False when the runtime has
    queued tasks but does not name them: then an accepted, not yet running attempt can be
    neither vouched for nor judged missing, and keeps its lease as before."""
    renew: list[str] = []
    missing: list[Attempt] = []
    for attempt in started:
        if attempt.runtime_task_id in listed or _in_grace(
            attempt, now_ms, start_timeout_ms, grace_ms
        ):
            renew.append(attempt.id)
        elif attempt.observed_state is ObservedState.ACCEPTED and not lists_queue:
            renew.append(attempt.id)
        elif attempt.sync_state is not SyncState.STALE:
            missing.append(attempt)
        # already unknown and still not listed: no renewal; it is being inspected
    return Vouched(tuple(renew), tuple(missing))


def _in_grace(attempt: Attempt, now_ms: int, start_timeout_ms: int, grace_ms: int) -> bool:
    fenced = attempt.start_requested_at_ms or attempt.created_at_ms
    if attempt.observed_state is ObservedState.UNCONFIRMED:
        return now_ms - fenced < start_timeout_ms + grace_ms
    last = max(fenced, attempt.observed_at_ms or 0)
    return now_ms - last < grace_ms


# -- the sentences a person reads as the reason of `unknown` ---------------------------------


def clock(ms: int | None) -> str:
    """``2026-12-01 14:32:05Z``: a UTC wall-clock time a person can compare with logs."""
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def not_listed(runtime_instance_id: str, now_ms: int) -> str:
    return (
        f"runtime {runtime_instance_id} is up but does not list this task since {clock(now_ms)}"
        "; asked it what became of the task"
    )


def lease_lapsed(attempt: Attempt) -> str:
    evidence = attempt.observed_at_ms
    last = f"last evidence {clock(evidence)}" if evidence else "no evidence since the start"
    return f"the lease lapsed at {clock(attempt.lease_expires_at_ms)} ({last})"


def start_unanswered(timeout_ms: int) -> str:
    return f"the runtime did not answer the start within {timeout_ms / 1000:g} s"
