"""Random command sequences over the pure domain, applied to a tiny in-memory store.

The store writes decisions the way the real stores must: compare-and-set on the run version
and on the attempt's status + event sequence, events appended with sequence = previous + 1.
After every step the invariants of docs/state-model.md must hold.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Final

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator.domain import commands as c
from coordinator.domain.decide import AttemptWrite, Context, Decision, RunWrite, decide
from coordinator.domain.display import display_state
from coordinator.domain.model import Actor, Attempt, NewEvent, Run, runtime_task_id_for
from coordinator.domain.rules import ATTEMPT_TRANSITIONS, RUN_TRANSITIONS
from coordinator.domain.states import ActorType, DisplayState
from coordinator.domain.states import AttemptStatus as A
from coordinator.domain.states import ObservedState as O
from coordinator.domain.states import RunStatus as R
from kernel.errors import (
    InvalidTransition,
    RuntimeTaskMismatch,
    VersionConflict,
)

ACTORS: Final = [
    Actor(ActorType.USER, "user-1"),
    Actor(ActorType.SCHEDULER, "claimer-1"),
    Actor(ActorType.RECONCILER, "reconciler-1"),
    Actor(ActorType.SYSTEM, "retry-policy"),
    Actor(ActorType.OPERATOR, "op-1"),
]
RUNTIME: Final = Actor(ActorType.RUNTIME, "inst-1")
RUN_KINDS: Final = (
    "approve",
    "claim",
    "release",
    "start_fence",
    "dispatch_unknown",
    "request_cancel",
    "mark_lost",
    "retry_attempt",
    "manual_retry",
    "release_as_recovery",
    "retry_as_recovery",
    "pause",
    "resume",
    "fail_run",
    "requeue",
    "resolve_succeeded",
    "resolve_failed",
    "resolve_not_started",
)
#: A small limit, so random walks reach dead_letter.
MAX_RECOVERIES: Final = 2
RUNTIME_KINDS: Final = ("rejected", "accepted", "running", "result", "output", "cancel_confirmed")
SEQ_MODES: Final = ("next", "next", "next", "skip", "same", "older", "zero", "negative")
OUTCOMES: Final = tuple(c.RuntimeOutcome)
_O = c.RuntimeOutcome
ADVANCE_EVIDENCE: Final = (
    ("accepted", _O.SUCCEEDED),
    ("running", _O.SUCCEEDED),
    ("running", _O.SUCCEEDED),
    ("result", _O.SUCCEEDED),
    ("result", _O.FAILED),
    ("result", _O.FAILED),
    ("result", _O.TIMED_OUT),
    ("result", _O.CANCELLED),
)


@dataclass(frozen=True)
class Applied:
    run_id: str
    outcome: str
    run_write: RunWrite
    events: int


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


def _run_command(kind: str, run_id: str, actor: Actor, version: int | None) -> RunCmd:
    if kind == "claim":
        return c.Claim(
            run_id, actor, version, runtime_instance_id="inst-1", runtime_device_id="dev-1"
        )
    if kind == "start_fence":
        return c.StartFence(run_id, actor, version, callback_token_hash="hash")
    if kind == "release_as_recovery":
        return c.ReleaseBeforeFence(
            run_id, actor, version, recovery=True, max_recoveries=MAX_RECOVERIES
        )
    if kind == "retry_as_recovery":
        return c.RetryAttempt(run_id, actor, version, recovery=True, max_recoveries=MAX_RECOVERIES)
    if kind.startswith("resolve_"):
        as_ = c.ResolveAs(kind.removeprefix("resolve_"))
        return c.Resolve(run_id, actor, version, reason="checked by hand", resolved_as=as_)
    operator: dict[str, type[c.PauseRun | c.ResumeRun | c.FailRun | c.Requeue]] = {
        "pause": c.PauseRun,
        "resume": c.ResumeRun,
        "fail_run": c.FailRun,
        "requeue": c.Requeue,
    }
    if kind in operator:
        return operator[kind](run_id, actor, version, reason="operator decision")
    cls: type[
        c.Approve
        | c.ReleaseBeforeFence
        | c.DispatchUnknown
        | c.RequestCancel
        | c.MarkLost
        | c.RetryAttempt
        | c.ManualRetry
    ] = {
        "approve": c.Approve,
        "release": c.ReleaseBeforeFence,
        "dispatch_unknown": c.DispatchUnknown,
        "request_cancel": c.RequestCancel,
        "mark_lost": c.MarkLost,
        "retry_attempt": c.RetryAttempt,
        "manual_retry": c.ManualRetry,
    }[kind]
    return cls(run_id, actor, version)


def _runtime_command(
    kind: str, attempt: Attempt, task_id: str, seq: int, outcome: c.RuntimeOutcome
) -> RuntimeCmd:
    args = (attempt.run_id, attempt.id, task_id, seq, RUNTIME)
    if kind == "result":
        return c.RuntimeResult(*args, outcome=outcome, exit_code=0, error_summary="boom")
    if kind == "output":
        return c.RuntimeNote(*args, kind=c.NoteKind.OUTPUT, details={"text": "line"})
    cls: type[c.DispatchRejected | c.RuntimeAccepted | c.RuntimeRunning | c.CancelConfirmed] = {
        "rejected": c.DispatchRejected,
        "accepted": c.RuntimeAccepted,
        "running": c.RuntimeRunning,
        "cancel_confirmed": c.CancelConfirmed,
    }[kind]
    return cls(*args)


def _seq(mode: str, last: int) -> int:
    return {
        "next": last + 1,
        "skip": last + 3,
        "same": last,
        "older": last - 1,
        "zero": 0,
        "negative": -5,
    }[mode]


@settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
class DomainMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runs: dict[str, Run] = {}
        self.attempts: dict[str, Attempt] = {}
        self.events: dict[str, list[tuple[int, NewEvent]]] = {}
        self.applied: list[Applied] = []
        self.output_writes: set[int] = set()  # indexes into applied: output chunks
        self.updates: dict[str, int] = {}
        self.terminal_runs: dict[str, Run] = {}
        self.terminal_attempts: dict[str, Attempt] = {}
        self.clock = 1_700_000_000_000
        self.ids = itertools.count(1)

    # -- the store ------------------------------------------------------------------------

    def context(self) -> Context:
        self.clock += 1_000
        return Context(
            now_ms=self.clock,
            new_id=lambda: f"id-{next(self.ids):05d}",
            new_token=lambda: f"tok-{next(self.ids):05d}",
        )

    def apply(self, decision: Decision) -> None:
        """Write a decision like a store: CAS on versions and attempt status + seq."""
        events = decision.events
        new = decision.run
        if decision.run_write is RunWrite.NONE:
            assert events == () and decision.attempt_write is None
            self.applied.append(Applied(new.id, decision.outcome, decision.run_write, 0))
            return
        if not events:
            # only an output chunk writes without an event (it goes to the output store; the
            # event log gets a periodic note): no status of the run or the attempt changes
            assert decision.run_write is RunWrite.UPDATE and decision.attempt is not None
            assert decision.run.status is self.runs[new.id].status
            assert decision.attempt.status is self.attempts[decision.attempt.id].status
            self.output_writes.add(len(self.applied))
        if decision.run_write is RunWrite.INSERT:
            assert new.id not in self.runs and new.version == 1 and new.event_sequence == 0
            stored = new
        else:
            current = self.runs[new.id]
            if decision.run_write is RunWrite.UPDATE:
                assert decision.expected_version == current.version  # the CAS
                assert new.version == current.version + 1
                assert new.event_sequence == current.event_sequence
                assert new.status is current.status or new.status in RUN_TRANSITIONS[current.status]
                self.updates[new.id] = self.updates.get(new.id, 0) + 1
                stored = new
            else:  # EVENTS_ONLY: the run row is untouched
                assert new == current
                stored = current
        self.write_attempt(decision)
        log = self.events.setdefault(new.id, [])
        assert stored.event_sequence == len(log)
        for event in events:
            assert isinstance(event.actor, Actor) and event.actor.type in ActorType
            previous = log[-1][0] if log else 0
            log.append((previous + 1, event))
        self.runs[new.id] = replace(stored, event_sequence=len(log))
        self.applied.append(Applied(new.id, decision.outcome, decision.run_write, len(events)))

    def write_attempt(self, decision: Decision) -> None:
        attempt = decision.attempt
        if decision.attempt_write is AttemptWrite.INSERT:
            assert attempt is not None and attempt.id not in self.attempts
            assert attempt.run_id == decision.run.id
            self.attempts[attempt.id] = attempt
        elif decision.attempt_write is AttemptWrite.UPDATE:
            assert attempt is not None
            current = self.attempts[attempt.id]
            assert current.status is decision.attempt_expected_status  # the CAS
            assert current.last_event_seq == decision.attempt_expected_seq
            assert (
                attempt.status is current.status
                or attempt.status in ATTEMPT_TRANSITIONS[current.status]
            )
            assert attempt.last_event_seq >= current.last_event_seq
            self.attempts[attempt.id] = attempt

    def current_attempt(self, run: Run) -> Attempt | None:
        return self.attempts.get(run.current_attempt_id) if run.current_attempt_id else None

    def pick_run(self, pick: int) -> Run:
        return self.runs[sorted(self.runs)[pick % len(self.runs)]]

    # -- rules ----------------------------------------------------------------------------

    @precondition(lambda self: len(self.runs) < 4)
    @rule(approval=st.booleans(), max_attempts=st.integers(1, 3), idempotent=st.booleans())
    def create(self, approval: bool, max_attempts: int, idempotent: bool) -> None:
        spec = c.RunSpec(
            project_id="p",
            owner_id="o",
            task_id="t",
            created_by=ACTORS[0],
            max_attempts=max_attempts,
            idempotent=idempotent,
            requires_approval=approval,
        )
        self.apply(decide(c.CreateRun(spec), None, None, self.context()))

    @precondition(lambda self: bool(self.runs))
    @rule(
        kind=st.sampled_from(RUN_KINDS),
        pick=st.integers(0, 1_000),
        skew=st.sampled_from([None, None, None, 0, 1, -1]),
        actor=st.sampled_from(ACTORS),
    )
    def run_command(self, kind: str, pick: int, skew: int | None, actor: Actor) -> None:
        run = self.pick_run(pick)
        version = None if skew is None else run.version + skew
        cmd = _run_command(kind, run.id, actor, version)
        try:
            decision = decide(cmd, run, self.current_attempt(run), self.context())
        except VersionConflict:
            assert skew not in (None, 0)
            return
        except InvalidTransition:
            assert skew in (None, 0)
            return
        assert skew in (None, 0), "a wrong expected version must conflict"
        self.apply(decision)

    @precondition(lambda self: bool(self.attempts))
    @rule(
        kind=st.sampled_from(RUNTIME_KINDS),
        pick=st.integers(0, 1_000),
        older=st.integers(0, 4),
        seq_mode=st.sampled_from(SEQ_MODES),
        wrong_task=st.integers(0, 9),
        outcome=st.sampled_from(OUTCOMES),
    )
    def runtime_event(
        self,
        kind: str,
        pick: int,
        older: int,
        seq_mode: str,
        wrong_task: int,
        outcome: c.RuntimeOutcome,
    ) -> None:
        with_attempts = sorted({a.run_id for a in self.attempts.values()})
        run = self.runs[with_attempts[pick % len(with_attempts)]]
        mine = sorted(
            (a for a in self.attempts.values() if a.run_id == run.id), key=lambda a: a.attempt_no
        )
        attempt = mine[pick % len(mine)] if older == 0 else mine[-1]
        task_id = attempt.runtime_task_id
        if wrong_task == 0:
            task_id = runtime_task_id_for("someone-else")
        cmd = _runtime_command(
            kind, attempt, task_id, _seq(seq_mode, attempt.last_event_seq), outcome
        )
        try:
            decision = decide(cmd, run, attempt, self.context())
        except RuntimeTaskMismatch:
            assert wrong_task == 0
            return
        except InvalidTransition:
            assert wrong_task != 0
            return
        assert wrong_task != 0, "a foreign runtime task id must be refused"
        self.apply(decision)

    @precondition(lambda self: bool(self.runs))
    @rule(pick=st.integers(0, 1_000), choice=st.integers(0, 7))
    def advance(self, pick: int, choice: int) -> None:
        """Push one run along the happy path, so long sequences reach the deep states."""
        run = self.pick_run(pick)
        attempt = self.current_attempt(run)
        cmd: c.Command
        if run.status is R.PENDING_APPROVAL:
            cmd = c.Approve(run.id, ACTORS[0], run.version)
        elif run.status is R.QUEUED:
            cmd = _run_command("claim", run.id, ACTORS[1], run.version)
        elif attempt is not None and attempt.status is A.CLAIMED:
            cmd = _run_command("start_fence", run.id, ACTORS[1], run.version)
        elif attempt is not None and attempt.status in (A.STARTING, A.RUNNING):
            kind, outcome = ADVANCE_EVIDENCE[choice]
            cmd = _runtime_command(
                kind, attempt, attempt.runtime_task_id, attempt.last_event_seq + 1, outcome
            )
        elif run.status in (R.RETRY_WAIT, R.LOST):
            cmd = c.RetryAttempt(run.id, ACTORS[4], run.version)
        elif run.status.terminal and choice == 0:
            cmd = c.ManualRetry(run.id, ACTORS[0], run.version)
        else:
            return
        try:
            decision = decide(cmd, run, attempt, self.context())
        except InvalidTransition:
            return  # e.g. a runtime result for a run waiting for approval
        self.apply(decision)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def terminal_runs_never_change(self) -> None:
        for run in self.runs.values():
            if run.status.terminal:
                seen = self.terminal_runs.setdefault(run.id, run)
                # only ignored late callbacks may append events to a terminal run
                assert replace(run, event_sequence=0) == replace(seen, event_sequence=0)

    @invariant()
    def terminal_attempts_never_change(self) -> None:
        for attempt in self.attempts.values():
            if attempt.status.terminal:
                assert self.terminal_attempts.setdefault(attempt.id, attempt) == attempt

    @invariant()
    def versions_count_the_applied_updates(self) -> None:
        for run in self.runs.values():
            assert run.version == 1 + self.updates.get(run.id, 0)

    @invariant()
    def event_sequences_are_gapless(self) -> None:
        for run in self.runs.values():
            log = self.events.get(run.id, [])
            assert [seq for seq, _ in log] == list(range(1, len(log) + 1))
            assert run.event_sequence == len(log)

    @invariant()
    def every_write_but_output_has_events_and_every_event_a_decision(self) -> None:
        for i, applied in enumerate(self.applied):
            if applied.run_write in (RunWrite.INSERT, RunWrite.UPDATE, RunWrite.EVENTS_ONLY):
                assert applied.events >= 1 or i in self.output_writes
            else:
                assert applied.events == 0
        assert sum(a.events for a in self.applied) == sum(map(len, self.events.values()))

    @invariant()
    def attempts_form_one_chain_per_run(self) -> None:
        for run in self.runs.values():
            mine = sorted(
                (a for a in self.attempts.values() if a.run_id == run.id),
                key=lambda a: a.attempt_no,
            )
            assert sum(not a.status.terminal for a in mine) <= 1
            assert [a.attempt_no for a in mine] == list(range(1, len(mine) + 1))
            assert run.attempt_count == len(mine)
            assert run.current_attempt_id == (mine[-1].id if mine else None)
            for previous, attempt in itertools.pairwise(mine):
                assert attempt.previous_attempt_id == previous.id
                assert previous.status.terminal
            for attempt in mine:
                assert attempt.runtime_task_id == runtime_task_id_for(attempt.id)

    @invariant()
    def statuses_are_backed_by_evidence(self) -> None:
        for run in self.runs.values():
            attempt = self.current_attempt(run)
            if attempt is None:
                assert run.status in (R.PENDING_APPROVAL, R.CANCELLED)
                continue
            if attempt.status in (A.QUEUED, A.CLAIMED):
                assert not attempt.fenced and attempt.observed_state is O.UNCONFIRMED
            if attempt.status in (A.STARTING, A.RUNNING):
                assert attempt.fenced
            if run.status is R.RUNNING:
                assert attempt.status is A.RUNNING and attempt.observed_state is O.RUNNING
            resolved = (attempt.termination_reason or "").startswith("resolved_") or any(
                e.type == "run.resolved" for _, e in self.events.get(run.id, [])
            )
            if run.status is R.SUCCEEDED and not resolved:
                assert attempt.status is A.SUCCEEDED
                assert attempt.observed_state is O.SUCCEEDED
            if run.status.terminal or run.status in (R.RETRY_WAIT, R.LOST):
                assert attempt.status.terminal
            if run.status is R.PAUSED:
                assert attempt.status is A.QUEUED
            if run.status is R.DEAD_LETTER:
                assert attempt.status in (A.QUEUED, A.LOST)
                assert run.recovery_count >= MAX_RECOVERIES
            if run.cancel_requested_at_ms is not None and not run.status.terminal:
                assert attempt.fenced and attempt.status in (A.STARTING, A.RUNNING)

    @invariant()
    def display_never_claims_more_than_the_evidence(self) -> None:
        for run in self.runs.values():
            attempt = self.current_attempt(run)
            shown = display_state(run, attempt)
            if run.status.terminal:
                assert shown.value == run.status.value
            if shown is DisplayState.RUNNING:
                assert attempt is not None and attempt.fenced
                assert attempt.observed_state is O.RUNNING
            if attempt is not None and not attempt.fenced:
                assert shown not in (
                    DisplayState.RUNNING,
                    DisplayState.UNKNOWN,
                    DisplayState.CANCELLING,
                    DisplayState.WAITING_RUNTIME,
                )


TestDomainStateMachine = DomainMachine.TestCase
