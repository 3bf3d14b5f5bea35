"""Exhaustive transition tests over the pure ``decide`` (docs/state-model.md is the contract).

Every reachable-shaped state (run status x current attempt status or none x start fence x
cancel requested x observed/sync state where they can vary) meets every command. Each pair
must either match the explicit table ``EXPECTED`` below, raise InvalidTransition, or, for
runtime evidence, be recorded as ``Outcome.IGNORED`` exactly in the documented cases.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Final, Literal

import pytest

from coordinator.domain import commands as c
from coordinator.domain.decide import (
    AttemptWrite,
    Context,
    Decision,
    Outcome,
    RunWrite,
    decide,
)
from coordinator.domain.model import Actor, Attempt, Run, runtime_task_id_for
from coordinator.domain.redaction import REDACTED
from coordinator.domain.rules import ATTEMPT_TRANSITIONS, RUN_TRANSITIONS
from coordinator.domain.states import ActorType, ScopePolicy
from coordinator.domain.states import AttemptStatus as A
from coordinator.domain.states import ObservedState as O
from coordinator.domain.states import RunStatus as R
from coordinator.domain.states import SyncState as S
from kernel.errors import (
    DomainError,
    ErrorReason,
    InvalidArgument,
    InvalidTransition,
    RuntimeTaskMismatch,
    VersionConflict,
)

# -- fixed identities and a deterministic context -------------------------------------------

NOW: Final = 1_700_000_000_000
RUN_ID: Final = "run-0001"
ATTEMPT_ID: Final = "att-0001"
TASK_ID: Final = runtime_task_id_for(ATTEMPT_ID)
VERSION: Final = 7
LAST_SEQ: Final = 3  # last_event_seq of an attempt that has runtime evidence
MAX_ATTEMPTS: Final = 2  # the factory's attempt is attempt 1: a failure leaves one retry

USER: Final = Actor(ActorType.USER, "user-1")
SCHEDULER: Final = Actor(ActorType.SCHEDULER, "claimer-1")
RECONCILER: Final = Actor(ActorType.RECONCILER, "reconciler-1")
SYSTEM: Final = Actor(ActorType.SYSTEM, "retry-policy")
OPERATOR: Final = Actor(ActorType.OPERATOR, "op-1")
RUNTIME: Final = Actor(ActorType.RUNTIME, "inst-1")


def make_context(now: int = NOW) -> Context:
    ids = itertools.count(1)
    tokens = itertools.count(1)
    return Context(
        now_ms=now,
        new_id=lambda: f"new-{next(ids):04d}",
        new_token=lambda: f"tok-{next(tokens):04d}",
    )


# -- state shapes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    run: R
    attempt: A | None
    fenced: bool = False
    cancel: bool = False
    observed: O = O.UNCONFIRMED
    sync: S = S.PENDING

    @property
    def id(self) -> str:
        parts = [self.run.value, self.attempt.value if self.attempt else "no_attempt"]
        if self.fenced:
            parts.append("fenced")
        if self.cancel:
            parts.append("cancel")
        if self.observed is not O.UNCONFIRMED:
            parts.append(f"obs_{self.observed.value}")
        if self.sync is not S.PENDING:
            parts.append(self.sync.value)
        return ",".join(parts)

    @property
    def tags(self) -> frozenset[str]:
        return frozenset(
            {
                "fenced" if self.fenced else "unfenced",
                "cancel" if self.cancel else "no_cancel",
                "stale" if self.sync is S.STALE else "not_stale",
                "unconfirmed" if self.observed is O.UNCONFIRMED else "confirmed",
                "seen_running" if self.observed is O.RUNNING else "never_seen_running",
            }
        )


# Which attempt statuses a run status can sit with (None: the run has no attempt).
_RUN_ATTEMPTS: dict[R, set[A | None]] = {
    R.PENDING_APPROVAL: {None},
    R.QUEUED: {A.QUEUED},
    R.DISPATCHING: {A.CLAIMED, A.STARTING},
    R.RUNNING: {A.RUNNING},
    R.WAITING_APPROVAL: {A.RUNNING},  # no command enters it yet; a legal resting state
    R.RETRY_WAIT: {A.FAILED},
    R.LOST: {A.LOST},
    R.PAUSED: {A.QUEUED},
    R.DEAD_LETTER: {A.QUEUED, A.LOST},  # an expired claim requeued, or a lost attempt
    R.SUCCEEDED: {A.SUCCEEDED, A.LOST},  # a lost attempt resolved as succeeded by a person
    R.FAILED: {A.FAILED, A.CANCELLED, A.LOST},  # failed by hand before start / when lost
    R.TIMED_OUT: {A.TIMED_OUT},
    R.CANCELLED: {None, A.CANCELLED, A.LOST, A.FAILED},
}
# The runtime evidence a runtime-ended attempt can carry.
_OBSERVED_AFTER: dict[A, set[O]] = {
    A.SUCCEEDED: {O.SUCCEEDED},
    A.FAILED: {O.FAILED},
    A.TIMED_OUT: {O.FAILED},
    A.CANCELLED: {O.CANCELLED, O.SUCCEEDED, O.FAILED},  # late success after a cancel
}


def _attempt_shape_ok(s: Shape) -> bool:
    a = s.attempt
    pristine = s.observed is O.UNCONFIRMED and s.sync is S.PENDING
    if a is None or a in (A.QUEUED, A.CLAIMED):
        return not s.fenced and pristine
    if not s.fenced:  # only a cancel before the fence ends an attempt that was never started
        return a is A.CANCELLED and pristine
    evidence_sync = {S.PENDING, S.STALE} if s.observed is O.UNCONFIRMED else {S.IN_SYNC, S.STALE}
    if a is A.STARTING:
        return s.observed in (O.UNCONFIRMED, O.ACCEPTED) and s.sync in evidence_sync
    if a in (A.RUNNING, A.LOST):
        allowed = {O.RUNNING} if a is A.RUNNING else {O.UNCONFIRMED, O.ACCEPTED, O.RUNNING}
        return s.observed in allowed and s.sync in evidence_sync
    return s.sync is S.IN_SYNC and s.observed in _OBSERVED_AFTER[a]


def _cancel_ok(s: Shape) -> bool:
    if s.run is R.CANCELLED:
        # without a request, only the runtime itself can have ended it as cancelled
        return s.cancel or (s.attempt is A.CANCELLED and s.fenced and s.observed is O.CANCELLED)
    if not s.cancel:
        return True
    # a pending request exists only on a started, unfinished attempt; otherwise it ended the run
    return not s.run.terminal and s.fenced and s.attempt in (A.STARTING, A.RUNNING)


def reachable_shapes() -> list[Shape]:
    shapes = []
    for run, attempt, fenced, cancel, observed, sync in itertools.product(
        R, [None, *A], [False, True], [False, True], O, S
    ):
        s = Shape(run, attempt, fenced, cancel, observed, sync)
        if attempt in _RUN_ATTEMPTS[run] and _attempt_shape_ok(s) and _cancel_ok(s):
            shapes.append(s)
    return shapes


SHAPES: Final = reachable_shapes()
SHAPES_WITH_ATTEMPT: Final = [s for s in SHAPES if s.attempt is not None]


def make_attempt(
    status: A,
    *,
    fenced: bool = False,
    cancel: bool = False,
    observed: O = O.UNCONFIRMED,
    sync: S = S.PENDING,
    attempt_id: str = ATTEMPT_ID,
    attempt_no: int = 1,
    previous_attempt_id: str | None = None,
) -> Attempt:
    claimed = status is not A.QUEUED and (fenced or status is A.CLAIMED)
    evidence = observed is not O.UNCONFIRMED
    live = status in (A.CLAIMED, A.STARTING, A.RUNNING)
    return Attempt(
        id=attempt_id,
        run_id=RUN_ID,
        attempt_no=attempt_no,
        previous_attempt_id=previous_attempt_id,
        owner_id="owner-1",
        agent_id="agent-1",
        execution_scope="scope-1",
        runtime_task_id=runtime_task_id_for(attempt_id),
        status=status,
        observed_state=observed,
        sync_state=sync,
        created_at_ms=NOW - 60_000,
        updated_at_ms=NOW - 1_000,
        observed_at_ms=NOW - 2_000 if evidence else None,
        claimed_at_ms=NOW - 5_000 if claimed else None,
        start_requested_at_ms=NOW - 4_000 if fenced else None,
        runtime_instance_id="inst-1" if claimed else None,
        runtime_device_id="dev-1" if claimed else None,
        last_event_seq=LAST_SEQ if evidence else 0,
        cancel_requested_at_ms=NOW - 3_000 if cancel else None,
        lease_token="lease-1" if live else None,
        lease_expires_at_ms=NOW + 25_000 if live else None,
        heartbeat_at_ms=NOW - 500 if live else None,
        callback_token_hash="hash-1" if fenced else None,
        callback_token_expires_at_ms=NOW + 86_400_000 if fenced else None,
        started_at_ms=NOW - 2_000 if status is A.RUNNING else None,
        finished_at_ms=NOW - 100 if status.terminal else None,
    )


def make_run(
    status: R,
    attempt: Attempt | None,
    *,
    cancel: bool = False,
    max_attempts: int = MAX_ATTEMPTS,
    idempotent: bool = False,
) -> Run:
    return Run(
        id=RUN_ID,
        project_id="proj-1",
        owner_id="owner-1",
        task_id="task-1",
        task_revision=3,
        agent_id="agent-1",
        execution_scope="scope-1",
        scope_policy=ScopePolicy.QUEUE,
        trigger_type="api",
        trigger_id=None,
        idempotency_key="idem-1",
        retry_of_run_id=None,
        priority=5,
        max_attempts=max_attempts,
        idempotent=idempotent,
        run_now=False,
        pinned_runtime_instance_id=None,
        required_labels=("gpu",),
        spec={"cmd": "echo hi"},
        status=status,
        version=VERSION,
        event_sequence=12,
        current_attempt_id=attempt.id if attempt else None,
        attempt_count=attempt.attempt_no if attempt else 0,
        created_by=USER.id,
        created_at_ms=NOW - 60_000,
        updated_at_ms=NOW - 1_000,
        queued_at_ms=NOW - 60_000 if status is not R.PENDING_APPROVAL else None,
        finished_at_ms=NOW - 100 if status.terminal else None,
        cancel_requested_at_ms=NOW - 3_000 if cancel else None,
        cancel_reason="cancelled_by_user" if cancel else None,
    )


def build(
    shape: Shape, *, max_attempts: int = MAX_ATTEMPTS, idempotent: bool = False
) -> tuple[Run, Attempt | None]:
    attempt = None
    if shape.attempt is not None:
        attempt = make_attempt(
            shape.attempt,
            fenced=shape.fenced,
            cancel=shape.cancel and shape.fenced,
            observed=shape.observed,
            sync=shape.sync,
        )
    run = make_run(
        shape.run, attempt, cancel=shape.cancel, max_attempts=max_attempts, idempotent=idempotent
    )
    return run, attempt


# -- commands ---------------------------------------------------------------------------------

RunCmd = (
    c.Approve
    | c.Claim
    | c.ReleaseBeforeFence
    | c.StartFence
    | c.DispatchUnknown
    | c.RequestCancel
    | c.MarkLost
    | c.RetryAttempt
    | c.ManualRetry
    | c.Resolve
    | c.FailRun
    | c.PauseRun
    | c.ResumeRun
    | c.Requeue
)
RuntimeCmd = (
    c.DispatchRejected
    | c.RuntimeAccepted
    | c.RuntimeRunning
    | c.RuntimeResult
    | c.RuntimeNote
    | c.CancelConfirmed
)

RUN_COMMANDS: Final[dict[str, Callable[[], RunCmd]]] = {
    "approve": lambda: c.Approve(RUN_ID, USER),
    "claim": lambda: c.Claim(
        RUN_ID, SCHEDULER, runtime_instance_id="inst-1", runtime_device_id="dev-1"
    ),
    "release_before_fence": lambda: c.ReleaseBeforeFence(RUN_ID, SCHEDULER),
    "start_fence": lambda: c.StartFence(RUN_ID, SCHEDULER, callback_token_hash="hash-1"),
    "dispatch_unknown": lambda: c.DispatchUnknown(RUN_ID, SCHEDULER),
    "request_cancel": lambda: c.RequestCancel(RUN_ID, USER),
    "mark_lost": lambda: c.MarkLost(RUN_ID, RECONCILER),
    "retry_attempt": lambda: c.RetryAttempt(RUN_ID, SYSTEM),
    "retry_attempt_by_operator": lambda: c.RetryAttempt(RUN_ID, OPERATOR),
    "manual_retry": lambda: c.ManualRetry(RUN_ID, USER),
    "pause": lambda: c.PauseRun(RUN_ID, OPERATOR, reason="maintenance"),
    "resume": lambda: c.ResumeRun(RUN_ID, OPERATOR, reason="maintenance over"),
    "fail_run": lambda: c.FailRun(RUN_ID, OPERATOR, reason="bad input"),
    "requeue": lambda: c.Requeue(RUN_ID, OPERATOR, reason="runtime fixed"),
    "resolve_succeeded": lambda: c.Resolve(
        RUN_ID, OPERATOR, reason="saw the output", resolved_as=c.ResolveAs.SUCCEEDED
    ),
    "resolve_failed": lambda: c.Resolve(
        RUN_ID, OPERATOR, reason="machine died", resolved_as=c.ResolveAs.FAILED
    ),
    "resolve_not_started": lambda: c.Resolve(
        RUN_ID, OPERATOR, reason="never reached the host", resolved_as=c.ResolveAs.NOT_STARTED
    ),
}


def _result(outcome: c.RuntimeOutcome, exit_code: int) -> Callable[[int], RuntimeCmd]:
    return lambda seq: c.RuntimeResult(
        RUN_ID, ATTEMPT_ID, TASK_ID, seq, RUNTIME, outcome=outcome, exit_code=exit_code
    )


RUNTIME_COMMANDS: Final[dict[str, Callable[[int], RuntimeCmd]]] = {
    "dispatch_rejected": lambda seq: c.DispatchRejected(RUN_ID, ATTEMPT_ID, TASK_ID, seq, RUNTIME),
    "runtime_accepted": lambda seq: c.RuntimeAccepted(RUN_ID, ATTEMPT_ID, TASK_ID, seq, RUNTIME),
    "runtime_running": lambda seq: c.RuntimeRunning(RUN_ID, ATTEMPT_ID, TASK_ID, seq, RUNTIME),
    "runtime_succeeded": _result(c.RuntimeOutcome.SUCCEEDED, 0),
    "runtime_failed": _result(c.RuntimeOutcome.FAILED, 1),
    "runtime_timed_out": _result(c.RuntimeOutcome.TIMED_OUT, 124),
    "runtime_cancelled": _result(c.RuntimeOutcome.CANCELLED, 143),
    "cancel_confirmed": lambda seq: c.CancelConfirmed(
        RUN_ID, ATTEMPT_ID, TASK_ID, seq, RUNTIME, exit_code=143
    ),
    "runtime_output": lambda seq: c.RuntimeNote(
        RUN_ID, ATTEMPT_ID, TASK_ID, seq, RUNTIME, kind=c.NoteKind.OUTPUT, details={"text": "x"}
    ),
    "runtime_signalled": lambda seq: c.RuntimeNote(
        RUN_ID, ATTEMPT_ID, TASK_ID, seq, RUNTIME, kind=c.NoteKind.SIGNALLED
    ),
}

# seq relative to the attempt's last_event_seq
SEQ_VARIANTS: Final[dict[str, Callable[[int], int]]] = {
    "fresh": lambda last: last + 1,
    "skip_ahead": lambda last: last + 5,
    "duplicate": lambda last: last,
    "out_of_order": lambda last: last - 1,
    "missing": lambda last: 0,
    "negative": lambda last: -1,
}

# -- the expected table -----------------------------------------------------------------------

ANY: Final = "any"


@dataclass(frozen=True)
class Row:
    """One accepted (run status, attempt status) and what the command makes of it.

    ``attempt_to`` None means the decision writes no attempt row. ``when`` lists tags the
    shape must carry (fenced/unfenced, cancel/no_cancel, stale/not_stale,
    unconfirmed/confirmed). The first matching row wins; no row means InvalidTransition.
    """

    run_from: R
    attempt_from: A | None | Literal["any"]
    run_to: R
    attempt_to: A | None
    events: tuple[str, ...]
    when: frozenset[str] = frozenset()
    outcome: Outcome = Outcome.APPLIED
    new_attempt: bool = False
    new_run: bool = False


def _when(*tags: str) -> frozenset[str]:
    return frozenset(tags)


TERMINAL: Final = (R.SUCCEEDED, R.FAILED, R.CANCELLED, R.TIMED_OUT)
# A started, unfinished attempt and the run statuses it can sit under.
LIVE_AFTER_FENCE: Final = (
    (R.DISPATCHING, A.STARTING),
    (R.RUNNING, A.RUNNING),
    (R.WAITING_APPROVAL, A.RUNNING),
)
# waiting_approval -> succeeded/failed/retry_wait is not in RUN_TRANSITIONS (seed B §6.2): a
# runtime result for a run waiting for approval raises unless it ends in timed_out/cancelled.
LIVE_NOT_WAITING: Final = LIVE_AFTER_FENCE[:2]
CANCEL_EVENTS: Final = ("attempt.cancelled", "run.cancelled")


def _cancel_rows() -> list[Row]:
    rows = [Row(t, ANY, t, None, (), outcome=Outcome.ALREADY_TERMINAL) for t in TERMINAL]
    for run, att in LIVE_AFTER_FENCE:
        rows.append(Row(run, att, run, None, (), _when("cancel"), Outcome.ALREADY_REQUESTED))
        rows.append(Row(run, att, run, att, ("run.cancel_requested",), _when("no_cancel")))
    before_fence = ("run.cancel_requested", "attempt.cancelled", "run.cancelled")
    attempt_already_ended = ("run.cancel_requested", "run.cancelled")
    rows += [
        Row(R.PENDING_APPROVAL, None, R.CANCELLED, None, attempt_already_ended),
        Row(R.QUEUED, A.QUEUED, R.CANCELLED, A.CANCELLED, before_fence),
        Row(R.PAUSED, A.QUEUED, R.CANCELLED, A.CANCELLED, before_fence),
        Row(R.DEAD_LETTER, A.QUEUED, R.CANCELLED, A.CANCELLED, before_fence),
        Row(R.DEAD_LETTER, A.LOST, R.CANCELLED, None, attempt_already_ended),
        Row(R.DISPATCHING, A.CLAIMED, R.CANCELLED, A.CANCELLED, before_fence),
        Row(R.RETRY_WAIT, A.FAILED, R.CANCELLED, None, attempt_already_ended),
        Row(R.LOST, A.LOST, R.CANCELLED, None, attempt_already_ended),
    ]
    return rows


def _result_rows(outcome: c.RuntimeOutcome) -> list[Row]:
    rows = [
        Row(r, a, R.CANCELLED, A.CANCELLED, CANCEL_EVENTS, _when("cancel"))
        for r, a in LIVE_AFTER_FENCE
    ]
    to_run, to_attempt, sources = {
        c.RuntimeOutcome.SUCCEEDED: (R.SUCCEEDED, A.SUCCEEDED, LIVE_NOT_WAITING),
        c.RuntimeOutcome.FAILED: (R.RETRY_WAIT, A.FAILED, LIVE_NOT_WAITING),
        c.RuntimeOutcome.TIMED_OUT: (R.TIMED_OUT, A.TIMED_OUT, LIVE_AFTER_FENCE),
        c.RuntimeOutcome.CANCELLED: (R.CANCELLED, A.CANCELLED, LIVE_AFTER_FENCE),
    }[outcome]
    events = (f"attempt.{to_attempt.value}", f"run.{to_run.value}")
    rows += [Row(r, a, to_run, to_attempt, events, _when("no_cancel")) for r, a in sources]
    return rows


def _resolve_rows(as_: c.ResolveAs) -> list[Row]:
    """An unknown attempt (started, stale), a stuck one (started, never reported running)
    or a lost one; never anything with evidence of running."""
    run_to, att_to = {
        c.ResolveAs.SUCCEEDED: (R.SUCCEEDED, A.SUCCEEDED),
        c.ResolveAs.FAILED: (R.FAILED, A.FAILED),
        c.ResolveAs.NOT_STARTED: (R.LOST, A.LOST),
    }[as_]
    # not started: only an attempt the runtime never reported running (still starting)
    sources = LIVE_AFTER_FENCE[:1] if as_ is c.ResolveAs.NOT_STARTED else LIVE_AFTER_FENCE
    rows = []
    # unknown (stale), or stuck: started and never reported running (issue #11)
    for run, att in sources:
        # (an attempt in status running was always seen running: only "stale" reaches it)
        for why in ("stale", "never_seen_running") if att is A.STARTING else ("stale",):
            head = ("run.resolved", f"attempt.{att_to.value}")
            rows.append(
                Row(run, att, R.CANCELLED, att_to, (*head, "run.cancelled"), _when(why, "cancel"))
            )
            if run is not R.WAITING_APPROVAL:  # it ends only cancelled, timed out or lost
                rows.append(
                    Row(
                        run,
                        att,
                        run_to,
                        att_to,
                        (*head, f"run.{run_to.value}"),
                        _when(why, "no_cancel"),
                    )
                )
    if as_ is c.ResolveAs.NOT_STARTED:
        rows.append(
            Row(
                R.LOST,
                A.LOST,
                R.QUEUED,
                A.QUEUED,
                ("run.resolved", "run.queued"),
                _when("never_seen_running"),
                new_attempt=True,
            )
        )
    else:
        rows.append(Row(R.LOST, A.LOST, run_to, None, ("run.resolved", f"run.{run_to.value}")))
    return rows


_FAIL_BY_HAND: Final = ("run.failed_by_operator", "attempt.cancelled", "run.failed")

EXPECTED: Final[dict[str, list[Row]]] = {
    # run commands
    "approve": [
        Row(
            R.PENDING_APPROVAL,
            None,
            R.QUEUED,
            A.QUEUED,
            ("run.approved", "run.queued"),
            new_attempt=True,
        ),
    ],
    "claim": [
        Row(R.QUEUED, A.QUEUED, R.DISPATCHING, A.CLAIMED, ("attempt.claimed", "run.dispatching"))
    ],
    "release_before_fence": [
        Row(
            R.DISPATCHING,
            A.CLAIMED,
            R.QUEUED,
            A.QUEUED,
            ("attempt.released", "run.queued"),
            _when("unfenced"),
        )
    ],
    "start_fence": [
        Row(
            R.DISPATCHING,
            A.CLAIMED,
            R.DISPATCHING,
            A.STARTING,
            ("attempt.start_requested",),
            _when("no_cancel"),
        )
    ],
    "dispatch_unknown": [
        row
        for run, att in LIVE_AFTER_FENCE
        for row in (
            Row(run, att, run, att, ("attempt.sync_stale",), _when("not_stale")),
            Row(run, att, run, None, (), _when("stale"), Outcome.ALREADY_REQUESTED),
        )
    ],
    "request_cancel": _cancel_rows(),
    "mark_lost": [
        row
        for run, att in LIVE_AFTER_FENCE
        for row in (
            Row(run, att, R.LOST, A.LOST, ("attempt.lost", "run.lost"), _when("no_cancel")),
            Row(run, att, R.CANCELLED, A.LOST, ("attempt.lost", "run.cancelled"), _when("cancel")),
        )
    ],
    # the factory's run is not idempotent: from lost only an operator may retry
    "retry_attempt": [
        Row(
            R.RETRY_WAIT,
            A.FAILED,
            R.QUEUED,
            A.QUEUED,
            ("run.retrying", "run.queued"),
            new_attempt=True,
        )
    ],
    "retry_attempt_by_operator": [
        Row(src, att, R.QUEUED, A.QUEUED, ("run.retrying", "run.queued"), new_attempt=True)
        for src, att in ((R.RETRY_WAIT, A.FAILED), (R.LOST, A.LOST))
    ],
    "manual_retry": [
        Row(
            src,
            ANY,
            R.QUEUED,
            A.QUEUED,
            ("run.created", "run.queued"),
            new_attempt=True,
            new_run=True,
        )
        for src in (R.FAILED, R.CANCELLED, R.TIMED_OUT)
    ],
    # operator commands (audited; docs/state-model.md "Operator commands")
    "pause": [Row(R.QUEUED, A.QUEUED, R.PAUSED, None, ("run.paused",))],
    "resume": [Row(R.PAUSED, A.QUEUED, R.QUEUED, None, ("run.resumed", "run.queued"))],
    "fail_run": [
        Row(R.QUEUED, A.QUEUED, R.FAILED, A.CANCELLED, _FAIL_BY_HAND),
        Row(R.PAUSED, A.QUEUED, R.FAILED, A.CANCELLED, _FAIL_BY_HAND),
        Row(R.DEAD_LETTER, A.QUEUED, R.FAILED, A.CANCELLED, _FAIL_BY_HAND),
        Row(R.DEAD_LETTER, A.LOST, R.FAILED, None, ("run.failed_by_operator", "run.failed")),
    ],
    "requeue": [
        Row(R.DEAD_LETTER, A.QUEUED, R.QUEUED, None, ("run.requeued", "run.queued")),
        Row(
            R.DEAD_LETTER,
            A.LOST,
            R.QUEUED,
            A.QUEUED,
            ("run.requeued", "run.queued"),
            new_attempt=True,
        ),
    ],
    "resolve_succeeded": _resolve_rows(c.ResolveAs.SUCCEEDED),
    "resolve_failed": _resolve_rows(c.ResolveAs.FAILED),
    "resolve_not_started": _resolve_rows(c.ResolveAs.NOT_STARTED),
    # runtime evidence that is not ignored (fresh seq, current unfinished attempt)
    "dispatch_rejected": [
        Row(
            R.DISPATCHING,
            A.STARTING,
            R.QUEUED,
            A.QUEUED,
            ("attempt.start_rejected", "run.queued"),
            _when("unconfirmed", "no_cancel"),
        ),
        Row(
            R.DISPATCHING,
            A.STARTING,
            R.CANCELLED,
            A.CANCELLED,
            ("attempt.start_rejected", "attempt.cancelled", "run.cancelled"),
            _when("unconfirmed", "cancel"),
        ),
    ],
    "runtime_accepted": [Row(r, a, r, a, ("attempt.accepted",)) for r, a in LIVE_AFTER_FENCE],
    "runtime_running": [
        Row(R.DISPATCHING, A.STARTING, R.RUNNING, A.RUNNING, ("attempt.running", "run.running")),
        Row(R.RUNNING, A.RUNNING, R.RUNNING, A.RUNNING, ("attempt.progress",)),
        Row(R.WAITING_APPROVAL, A.RUNNING, R.WAITING_APPROVAL, A.RUNNING, ("attempt.progress",)),
    ],
    "runtime_succeeded": _result_rows(c.RuntimeOutcome.SUCCEEDED),
    "runtime_failed": _result_rows(c.RuntimeOutcome.FAILED),
    "runtime_timed_out": _result_rows(c.RuntimeOutcome.TIMED_OUT),
    "runtime_cancelled": _result_rows(c.RuntimeOutcome.CANCELLED),
    "cancel_confirmed": [
        Row(r, a, R.CANCELLED, A.CANCELLED, CANCEL_EVENTS, _when("cancel"))
        for r, a in LIVE_AFTER_FENCE
    ],
    # the chunk goes to the output store; a first chunk gets the progress note
    "runtime_output": [
        Row(r, a, r, a, ("attempt.output_progressed",)) for r, a in LIVE_AFTER_FENCE
    ],
    "runtime_signalled": [Row(r, a, r, a, ("attempt.signalled",)) for r, a in LIVE_AFTER_FENCE],
}


def expected_row(command: str, shape: Shape) -> Row | None:
    for row in EXPECTED[command]:
        if (
            row.run_from is shape.run
            and (row.attempt_from == ANY or row.attempt_from is shape.attempt)
            and row.when <= shape.tags
        ):
            return row
    return None


def expected_ignore(shape: Shape, seq: int, last_seq: int, command: str = "") -> str | None:
    """The documented ignore rules, in their order (docs/state-model.md). A refusal is an
    answer to a Start, not an event: its seq is never checked."""
    assert shape.attempt is not None
    sequenced = command != "dispatch_rejected"
    if sequenced and seq <= 0:
        return "missing_seq"
    if shape.attempt.terminal or shape.run.terminal:
        return "after_terminal"
    if sequenced and seq <= last_seq:
        return "duplicate_or_out_of_order"
    return None


# -- checks shared by every decision ---------------------------------------------------------


def check_common(decision: Decision, run: Run, cmd: c.Command) -> None:
    """Actors on every event; versions +1 on UPDATE, unchanged otherwise; rows stay rows."""
    actor = cmd.spec.created_by if isinstance(cmd, c.CreateRun) else cmd.actor
    assert all(e.actor == actor for e in decision.events)
    assert all(isinstance(e.actor.type, ActorType) for e in decision.events)
    if decision.run_write is RunWrite.UPDATE:
        assert decision.outcome is Outcome.APPLIED
        assert decision.expected_version == run.version
        assert decision.run.version == run.version + 1
        assert decision.run.id == run.id
        assert decision.events, "an applied update always appends an event"
    elif decision.run_write is RunWrite.INSERT:
        assert decision.run.version == 1 and decision.events
    else:
        assert decision.run == run
    if decision.outcome is Outcome.IGNORED:
        assert decision.run_write is RunWrite.EVENTS_ONLY and decision.attempt_write is None
        assert [e.type for e in decision.events] == ["attempt.late_callback_ignored"]
    if decision.run_write is RunWrite.NONE:
        assert decision.events == () and decision.attempt_write is None


def check_row(decision: Decision, row: Row, run: Run, attempt: Attempt | None) -> None:
    assert decision.outcome is row.outcome
    assert tuple(e.type for e in decision.events) == row.events
    if row.new_run:
        assert decision.run_write is RunWrite.INSERT
        assert decision.run.retry_of_run_id == run.id and decision.run.id != run.id
    else:
        assert decision.run.id == run.id
        assert decision.run.status is run.status or row.run_to in RUN_TRANSITIONS[run.status]
    assert decision.run.status is row.run_to
    if row.new_attempt:
        new = decision.attempt
        assert decision.attempt_write is AttemptWrite.INSERT and new is not None
        assert new.status is A.QUEUED and new.run_id == decision.run.id
        assert decision.run.current_attempt_id == new.id
        assert new.runtime_task_id == runtime_task_id_for(new.id)
        assert attempt is None or new.id != attempt.id
    elif row.attempt_to is None:
        assert decision.attempt_write is None
    else:
        after = decision.attempt
        assert attempt is not None and after is not None
        assert decision.attempt_write is AttemptWrite.UPDATE
        assert after.id == attempt.id and after.attempt_no == attempt.attempt_no
        assert after.runtime_task_id == attempt.runtime_task_id
        assert after.status is row.attempt_to
        assert after.status is attempt.status or after.status in ATTEMPT_TRANSITIONS[attempt.status]
        assert decision.attempt_expected_status is attempt.status
        assert decision.attempt_expected_seq == attempt.last_event_seq


# -- the exhaustive matrix --------------------------------------------------------------------


def _run_cases() -> Iterator[object]:
    for shape in SHAPES:
        for name in RUN_COMMANDS:
            yield pytest.param(shape, name, id=f"{name}@{shape.id}")


@pytest.mark.parametrize(("shape", "command"), list(_run_cases()))
def test_run_command(shape: Shape, command: str) -> None:
    run, attempt = build(shape)
    cmd = RUN_COMMANDS[command]()
    row = expected_row(command, shape)
    if row is None:
        with pytest.raises(InvalidTransition) as info:
            decide(cmd, run, attempt, make_context())
        assert info.value.reason is ErrorReason.INVALID_RUN_TRANSITION
        assert info.value.metadata["run_status"] == shape.run.value
        return
    decision = decide(cmd, run, attempt, make_context())
    check_common(decision, run, cmd)
    check_row(decision, row, run, attempt)


def _runtime_cases() -> Iterator[object]:
    for shape in SHAPES_WITH_ATTEMPT:
        for name in RUNTIME_COMMANDS:
            for variant in SEQ_VARIANTS:
                yield pytest.param(shape, name, variant, id=f"{name}@{shape.id}@seq_{variant}")


@pytest.mark.parametrize(("shape", "command", "seq_variant"), list(_runtime_cases()))
def test_runtime_command(shape: Shape, command: str, seq_variant: str) -> None:
    run, attempt = build(shape)
    assert attempt is not None
    seq = SEQ_VARIANTS[seq_variant](attempt.last_event_seq)
    cmd = RUNTIME_COMMANDS[command](seq)
    why = expected_ignore(shape, seq, attempt.last_event_seq, command)
    row = None if why else expected_row(command, shape)
    if why is None and row is None:
        with pytest.raises(InvalidTransition) as info:
            decide(cmd, run, attempt, make_context())
        assert info.value.reason is ErrorReason.INVALID_RUN_TRANSITION
        return
    decision = decide(cmd, run, attempt, make_context())
    check_common(decision, run, cmd)
    if why is not None:
        assert decision.outcome is Outcome.IGNORED
        (event,) = decision.events
        assert event.attempt_id == attempt.id
        assert event.payload["ignored_because"] == why
        assert event.payload["reported_type"] == type(cmd).__name__
        assert event.payload["last_event_seq"] == attempt.last_event_seq
        return
    assert row is not None
    check_row(decision, row, run, attempt)
    after = decision.attempt
    # a refusal leaves the attempt's seq where it was (the next Start's ACCEPTED is seq 1)
    moved = attempt.last_event_seq if command == "dispatch_rejected" else seq
    assert after is not None and after.last_event_seq == moved
    if command != "dispatch_rejected":
        assert after.sync_state is S.IN_SYNC and after.observed_at_ms == NOW


@pytest.mark.parametrize("shape", SHAPES_WITH_ATTEMPT, ids=lambda s: s.id)
@pytest.mark.parametrize("command", list(RUNTIME_COMMANDS))
def test_runtime_evidence_for_an_older_attempt_is_ignored(shape: Shape, command: str) -> None:
    """Evidence for an attempt that is no longer the run's current one never applies."""
    run, attempt = build(shape)
    assert attempt is not None
    run = replace(run, current_attempt_id="att-newer")
    cmd = RUNTIME_COMMANDS[command](attempt.last_event_seq + 1)
    decision = decide(cmd, run, attempt, make_context())
    check_common(decision, run, cmd)
    assert decision.outcome is Outcome.IGNORED
    ended = attempt.status.terminal or run.status.terminal
    expected = "after_terminal" if ended else "not_current_attempt"
    assert decision.events[0].payload["ignored_because"] == expected


def test_every_reachable_run_and_attempt_status_is_covered() -> None:
    assert {s.run for s in SHAPES} == set(R)
    assert {s.attempt for s in SHAPES} == {None, *A}
    for name, rows in EXPECTED.items():
        for row in rows:
            assert any(expected_row(name, s) is row for s in SHAPES), (name, row)


# -- terminal runs ----------------------------------------------------------------------------

TERMINAL_SHAPES: Final = [s for s in SHAPES if s.run.terminal]


@pytest.mark.parametrize("shape", TERMINAL_SHAPES, ids=lambda s: s.id)
def test_terminal_runs_never_change(shape: Shape) -> None:
    run, attempt = build(shape)
    commands: list[c.Command] = [make() for make in RUN_COMMANDS.values()]
    if attempt is not None:
        commands += [make(seq) for make in RUNTIME_COMMANDS.values() for seq in (0, 1, 99)]
    for cmd in commands:
        try:
            decision = decide(cmd, run, attempt, make_context())
        except InvalidTransition:
            continue
        if isinstance(cmd, c.ManualRetry):  # a new run; this one is not written
            assert decision.run.id != run.id and decision.run_write is RunWrite.INSERT
            continue
        assert decision.outcome in (Outcome.IGNORED, Outcome.ALREADY_TERMINAL), cmd
        assert decision.run == run and decision.attempt_write is None


# -- rules conformance on every shape, reachable or not -------------------------------------


def _all_shapes() -> list[Shape]:
    return [
        Shape(run, att, fenced, cancel, observed, sync)
        for run, att, fenced, cancel in itertools.product(
            R, [None, *A], [False, True], [False, True]
        )
        for observed, sync in ((O.UNCONFIRMED, S.PENDING), (O.RUNNING, S.STALE))
        if not (att is None and (fenced or observed is not O.UNCONFIRMED))
    ]


@pytest.mark.parametrize("command", [*RUN_COMMANDS, *RUNTIME_COMMANDS])
def test_no_command_leaves_the_transition_tables_on_any_shape(command: str) -> None:
    """Even on shapes decide never produces, a decision stays inside rules.py or raises."""
    for shape in _all_shapes():
        run, attempt = build(shape)
        last = attempt.last_event_seq if attempt else 0
        cmd = (
            RUN_COMMANDS[command]()
            if command in RUN_COMMANDS
            else RUNTIME_COMMANDS[command](last + 1)
        )
        try:
            decision = decide(cmd, run, attempt, make_context())
        except DomainError:
            continue
        check_common(decision, run, cmd)
        if decision.run_write is RunWrite.UPDATE:
            assert decision.run.status is run.status or (
                decision.run.status in RUN_TRANSITIONS[run.status]
            ), shape.id
        if decision.attempt_write is AttemptWrite.UPDATE:
            assert attempt is not None and decision.attempt is not None
            new = decision.attempt.status
            assert new is attempt.status or new in ATTEMPT_TRANSITIONS[attempt.status], shape.id


# -- runtime identity and run versions --------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES_WITH_ATTEMPT, ids=lambda s: s.id)
@pytest.mark.parametrize("command", list(RUNTIME_COMMANDS))
def test_wrong_runtime_task_id_is_rejected(shape: Shape, command: str) -> None:
    run, attempt = build(shape)
    assert attempt is not None
    cmd = replace(
        RUNTIME_COMMANDS[command](attempt.last_event_seq + 1),
        runtime_task_id=runtime_task_id_for("att-other"),
    )
    with pytest.raises(RuntimeTaskMismatch) as info:
        decide(cmd, run, attempt, make_context())
    assert info.value.reason is ErrorReason.RUNTIME_TASK_MISMATCH


@pytest.mark.parametrize("command", list(RUNTIME_COMMANDS))
def test_runtime_evidence_without_its_attempt_is_an_invalid_argument(command: str) -> None:
    run, _ = build(Shape(R.RUNNING, A.RUNNING, True, False, O.RUNNING, S.IN_SYNC))
    with pytest.raises(InvalidArgument):
        decide(RUNTIME_COMMANDS[command](LAST_SEQ + 1), run, None, make_context())
    other = make_attempt(
        A.RUNNING, fenced=True, observed=O.RUNNING, sync=S.IN_SYNC, attempt_id="att-other"
    )
    with pytest.raises(InvalidArgument):
        decide(RUNTIME_COMMANDS[command](LAST_SEQ + 1), run, other, make_context())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
@pytest.mark.parametrize("command", list(RUN_COMMANDS))
@pytest.mark.parametrize("skew", [-1, 1])
def test_wrong_expected_version_is_a_conflict(shape: Shape, command: str, skew: int) -> None:
    run, attempt = build(shape)
    cmd = replace(RUN_COMMANDS[command](), expected_version=run.version + skew)
    with pytest.raises(VersionConflict) as info:
        decide(cmd, run, attempt, make_context())
    assert info.value.reason is ErrorReason.RUN_VERSION_CONFLICT
    assert info.value.metadata["current_version"] == str(run.version)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
@pytest.mark.parametrize("command", list(RUN_COMMANDS))
def test_right_expected_version_decides_like_no_version(shape: Shape, command: str) -> None:
    run, attempt = build(shape)
    plain = RUN_COMMANDS[command]()
    versioned = replace(plain, expected_version=run.version)
    try:
        without = decide(plain, run, attempt, make_context())
    except DomainError as err:
        with pytest.raises(type(err)):
            decide(versioned, run, attempt, make_context())
        return
    assert decide(versioned, run, attempt, make_context()) == without


# -- scenarios --------------------------------------------------------------------------------


def apply(decision: Decision, run: Run, attempt: Attempt | None) -> tuple[Run, Attempt | None]:
    """What a store holds after writing ``decision`` (the run and its current attempt)."""
    new_run = decision.run if decision.run_write in (RunWrite.UPDATE, RunWrite.INSERT) else run
    new_attempt = decision.attempt if decision.attempt_write is not None else attempt
    return new_run, new_attempt


def _shape(
    run: R,
    att: A | None,
    *,
    fenced: bool = False,
    observed: O = O.UNCONFIRMED,
    sync: S = S.PENDING,
) -> tuple[Run, Attempt | None]:
    return build(Shape(run, att, fenced=fenced, observed=observed, sync=sync))


def test_create_run_inserts_a_queued_run_with_its_first_attempt() -> None:
    spec = c.RunSpec(project_id="p", owner_id="o", task_id="t", created_by=USER, max_attempts=3)
    d = decide(c.CreateRun(spec), None, None, make_context())
    check_common(d, d.run, c.CreateRun(spec))
    assert d.run_write is RunWrite.INSERT and d.run.status is R.QUEUED and d.run.version == 1
    assert d.attempt is not None and d.attempt_write is AttemptWrite.INSERT
    assert (d.attempt.attempt_no, d.attempt.previous_attempt_id) == (1, None)
    assert d.attempt.runtime_task_id == runtime_task_id_for(d.attempt.id)
    assert d.run.current_attempt_id == d.attempt.id and d.run.attempt_count == 1
    assert [e.type for e in d.events] == ["run.created", "run.queued"]


def test_create_run_needing_approval_has_no_attempt_yet() -> None:
    spec = c.RunSpec(
        project_id="p", owner_id="o", task_id="t", created_by=USER, requires_approval=True
    )
    d = decide(c.CreateRun(spec), None, None, make_context())
    assert d.run.status is R.PENDING_APPROVAL and d.attempt is None and d.attempt_write is None
    assert d.run.current_attempt_id is None and d.run.attempt_count == 0
    assert [e.type for e in d.events] == ["run.created"]


def test_a_run_command_needs_a_run() -> None:
    with pytest.raises(InvalidArgument):
        decide(c.Approve(RUN_ID, USER), None, None, make_context())


@pytest.mark.parametrize(("run_status", "att"), [(R.QUEUED, A.QUEUED), (R.DISPATCHING, A.CLAIMED)])
def test_cancel_before_the_fence_cancels_at_once(run_status: R, att: A) -> None:
    run, attempt = _shape(run_status, att)
    d = decide(c.RequestCancel(RUN_ID, USER), run, attempt, make_context())
    assert d.outcome is Outcome.APPLIED
    assert d.run.status is R.CANCELLED and d.run.finished_at_ms == NOW
    assert d.attempt is not None and d.attempt.status is A.CANCELLED
    assert d.attempt.lease_token is None
    assert d.attempt.termination_reason == "cancelled_before_start"
    # the dispatcher that holds the claim can no longer fence it
    run, attempt = apply(d, run, attempt)
    with pytest.raises(InvalidTransition):
        decide(
            c.StartFence(RUN_ID, SCHEDULER, callback_token_hash="h"), run, attempt, make_context()
        )


def test_cancel_after_the_fence_only_records_the_request() -> None:
    run, attempt = _shape(R.RUNNING, A.RUNNING, fenced=True, observed=O.RUNNING, sync=S.IN_SYNC)
    first = decide(c.RequestCancel(RUN_ID, USER, reason="stop"), run, attempt, make_context())
    assert first.outcome is Outcome.APPLIED and first.run.status is R.RUNNING
    assert first.attempt is not None and first.attempt.status is A.RUNNING
    assert first.run.cancel_requested_at_ms == NOW and first.run.cancel_reason == "stop"
    assert first.attempt.cancel_requested_at_ms == NOW
    assert [e.type for e in first.events] == ["run.cancel_requested"]
    run, attempt = apply(first, run, attempt)

    second = decide(c.RequestCancel(RUN_ID, USER), run, attempt, make_context(NOW + 1))
    assert second.outcome is Outcome.ALREADY_REQUESTED
    assert second.events == () and second.run_write is RunWrite.NONE and second.run == run

    late = decide(
        RUNTIME_COMMANDS["runtime_succeeded"](LAST_SEQ + 1), run, attempt, make_context(NOW + 2)
    )
    assert late.run.status is R.CANCELLED
    assert late.attempt is not None and late.attempt.status is A.CANCELLED
    assert late.attempt.observed_state is O.SUCCEEDED  # evidence kept, decision is cancelled
    assert late.run.error_code == "cancelled_by_user"


def test_cancel_reason_is_redacted() -> None:
    run, attempt = _shape(R.RUNNING, A.RUNNING, fenced=True, observed=O.RUNNING, sync=S.IN_SYNC)
    d = decide(
        c.RequestCancel(RUN_ID, USER, reason="password=hunter2"), run, attempt, make_context()
    )
    assert d.run.cancel_reason is not None and "hunter2" not in d.run.cancel_reason
    assert all("hunter2" not in str(e.payload) for e in d.events)


def test_failure_with_attempts_left_waits_then_retries_on_a_new_attempt() -> None:
    run, attempt = _shape(R.RUNNING, A.RUNNING, fenced=True, observed=O.RUNNING, sync=S.IN_SYNC)
    assert attempt is not None
    failed = decide(RUNTIME_COMMANDS["runtime_failed"](LAST_SEQ + 1), run, attempt, make_context())
    assert failed.run.status is R.RETRY_WAIT
    assert failed.attempt is not None and failed.attempt.status is A.FAILED
    run, old = apply(failed, run, attempt)
    assert old is not None

    retry = decide(c.RetryAttempt(RUN_ID, SYSTEM), run, old, make_context(NOW + 10))
    new = retry.attempt
    assert retry.attempt_write is AttemptWrite.INSERT and new is not None
    assert new.attempt_no == old.attempt_no + 1 and new.previous_attempt_id == old.id
    assert new.id != old.id and new.runtime_task_id != old.runtime_task_id
    assert new.runtime_task_id == runtime_task_id_for(new.id)
    assert (new.status, new.observed_state, new.sync_state) == (A.QUEUED, O.UNCONFIRMED, S.PENDING)
    assert retry.run.status is R.QUEUED and retry.run.current_attempt_id == new.id
    assert retry.run.attempt_count == run.attempt_count + 1
    assert retry.attempt_expected_status is None  # the old attempt row is not written at all


def test_failure_without_attempts_left_fails_the_run() -> None:
    shape = Shape(R.RUNNING, A.RUNNING, True, False, O.RUNNING, S.IN_SYNC)
    run, attempt = build(shape, max_attempts=1)
    d = decide(RUNTIME_COMMANDS["runtime_failed"](LAST_SEQ + 1), run, attempt, make_context())
    assert d.run.status is R.FAILED and d.run.error_code == "process_exit_error"
    assert [e.type for e in d.events] == ["attempt.failed", "run.failed"]


def test_a_lost_idempotent_run_retries_automatically() -> None:
    shape = Shape(R.LOST, A.LOST, True, False, O.RUNNING, S.STALE)
    run, attempt = build(shape, idempotent=True)
    d = decide(c.RetryAttempt(RUN_ID, SYSTEM), run, attempt, make_context())
    assert d.run.status is R.QUEUED and d.attempt is not None and d.attempt.attempt_no == 2


def test_manual_retry_creates_a_new_run_and_leaves_the_source_alone() -> None:
    run, attempt = _shape(R.FAILED, A.FAILED, fenced=True, observed=O.FAILED, sync=S.IN_SYNC)
    before = run
    d = decide(c.ManualRetry(RUN_ID, OPERATOR), run, attempt, make_context())
    assert run == before
    assert d.run_write is RunWrite.INSERT and d.run.id != run.id
    assert d.run.retry_of_run_id == run.id and d.run.trigger_id == run.id
    assert d.run.trigger_type == "manual_retry" and d.run.idempotency_key is None
    assert (d.run.status, d.run.version, d.run.attempt_count) == (R.QUEUED, 1, 1)
    assert (d.run.task_id, d.run.task_revision, d.run.spec) == (
        run.task_id,
        run.task_revision,
        run.spec,
    )
    assert d.attempt is not None and d.attempt.run_id == d.run.id and d.attempt.attempt_no == 1
    assert all(e.actor == OPERATOR for e in d.events)


def test_claim_rotates_the_lease_and_respects_the_pin() -> None:
    run, attempt = _shape(R.QUEUED, A.QUEUED)
    d = decide(RUN_COMMANDS["claim"](), run, attempt, make_context())
    assert d.attempt is not None and d.attempt.lease_token == "tok-0001"
    assert d.attempt.lease_expires_at_ms == NOW + 30_000 and not d.attempt.fenced
    pinned = replace(run, pinned_runtime_instance_id="inst-9")
    with pytest.raises(InvalidTransition):
        decide(RUN_COMMANDS["claim"](), pinned, attempt, make_context())
    with pytest.raises(InvalidArgument):
        decide(c.Claim(RUN_ID, SCHEDULER), run, attempt, make_context())


def test_start_fence_needs_the_callback_token_hash() -> None:
    run, attempt = _shape(R.DISPATCHING, A.CLAIMED)
    with pytest.raises(InvalidArgument):
        decide(c.StartFence(RUN_ID, SCHEDULER), run, attempt, make_context())
    d = decide(RUN_COMMANDS["start_fence"](), run, attempt, make_context())
    assert d.attempt is not None and d.attempt.start_requested_at_ms == NOW and d.attempt.fenced


def test_release_and_rejection_reuse_the_same_attempt_row() -> None:
    run, attempt = _shape(R.DISPATCHING, A.CLAIMED)
    released = decide(RUN_COMMANDS["release_before_fence"](), run, attempt, make_context())
    assert released.attempt is not None and attempt is not None
    assert (released.attempt.id, released.attempt.attempt_no) == (attempt.id, attempt.attempt_no)
    assert released.attempt.lease_token is None and released.attempt.runtime_instance_id is None
    assert released.run.attempt_count == run.attempt_count

    run, attempt = _shape(R.DISPATCHING, A.STARTING, fenced=True)
    rejected = decide(RUNTIME_COMMANDS["dispatch_rejected"](1), run, attempt, make_context())
    assert rejected.attempt is not None and attempt is not None
    assert rejected.attempt.id == attempt.id and not rejected.attempt.fenced
    assert rejected.attempt.callback_token_hash is None
    assert rejected.run.attempt_count == run.attempt_count


def test_runtime_error_summary_is_redacted() -> None:
    run, attempt = _shape(R.RUNNING, A.RUNNING, fenced=True, observed=O.RUNNING, sync=S.IN_SYNC)
    cmd = c.RuntimeResult(
        RUN_ID,
        ATTEMPT_ID,
        TASK_ID,
        LAST_SEQ + 1,
        RUNTIME,
        outcome=c.RuntimeOutcome.FAILED,
        exit_code=1,
        error_summary="db login failed: password=hunter2",
    )
    d = decide(cmd, run, attempt, make_context())
    assert d.attempt is not None and d.attempt.error_summary is not None
    assert "hunter2" not in d.attempt.error_summary and REDACTED in d.attempt.error_summary
    assert d.run.error_summary == d.attempt.error_summary
    assert all("hunter2" not in str(e.payload) for e in d.events)


def test_mark_lost_is_refused_before_the_fence() -> None:
    run, attempt = _shape(R.DISPATCHING, A.CLAIMED)
    with pytest.raises(InvalidTransition):
        decide(RUN_COMMANDS["mark_lost"](), run, attempt, make_context())


def test_dispatch_unknown_never_touches_a_terminal_run() -> None:
    """Unreachable through decide (a terminal run's attempt is terminal), but a terminal run
    must not change even if the store hands over an inconsistent attempt row."""
    for status in TERMINAL:
        run, attempt = _shape(status, A.RUNNING, fenced=True, observed=O.RUNNING, sync=S.IN_SYNC)
        try:
            decision = decide(RUN_COMMANDS["dispatch_unknown"](), run, attempt, make_context())
        except InvalidTransition:
            continue
        assert decision.run == run and decision.attempt_write is None
