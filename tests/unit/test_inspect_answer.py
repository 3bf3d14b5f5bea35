"""A trusted inspect answer (seed A §10): proof of running, of finishing, or of absence."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from coordinator.domain import commands as c
from coordinator.domain.decide import Context, decide
from coordinator.domain.display import display_state
from coordinator.domain.model import Actor, Attempt, Run
from coordinator.domain.states import (
    ActorType,
    AttemptStatus,
    DisplayState,
    ObservedState,
    RunStatus,
    SyncState,
)
from kernel.errors import InvalidTransition, RuntimeTaskMismatch
from tests.support.factories import RUNTIME, SCHEDULER, USER, spec

_ids = itertools.count(1)


def ctx(now: int = 1_000) -> Context:
    return Context(now, lambda: f"id-{next(_ids):04d}", lambda: "token")


def started(observed: ObservedState = ObservedState.ACCEPTED) -> tuple[Run, Attempt]:
    created = decide(c.CreateRun(spec()), None, None, ctx())
    run, attempt = created.run, created.attempt
    for command in (
        c.Claim(run.id, SCHEDULER, runtime_instance_id="inst"),
        c.StartFence(run.id, SCHEDULER, callback_token_hash="h"),
        c.DispatchUnknown(run.id, SCHEDULER),
    ):
        d = decide(command, run, attempt, ctx())
        run, attempt = d.run, d.attempt
    assert attempt is not None
    if observed is ObservedState.RUNNING:
        d = decide(
            c.RuntimeRunning(run.id, attempt.id, attempt.runtime_task_id, 1, RUNTIME),
            run,
            attempt,
            ctx(),
        )
        run, attempt = d.run, d.attempt
        assert attempt is not None
        d = decide(c.DispatchUnknown(run.id, SCHEDULER), run, attempt, ctx())
        run, attempt = d.run, d.attempt
    assert attempt is not None and attempt.sync_state is SyncState.STALE
    return run, attempt


def answer(run: Run, attempt: Attempt, state: c.InspectState, **extra: object) -> c.InspectAnswer:
    return c.InspectAnswer(
        run.id,
        Actor(ActorType.RUNTIME, "inst"),
        attempt_id=attempt.id,
        runtime_task_id=attempt.runtime_task_id,
        state=state,
        **extra,  # type: ignore[arg-type]
    )


def test_running_with_an_active_turn_is_proof_of_running() -> None:
    run, attempt = started()
    assert display_state(run, attempt) is DisplayState.UNKNOWN
    d = decide(answer(run, attempt, c.InspectState.RUNNING, turn_active=True), run, attempt, ctx())
    assert d.attempt is not None
    assert display_state(d.run, d.attempt) is DisplayState.RUNNING
    assert d.attempt.status is AttemptStatus.RUNNING and d.attempt.sync_state is SyncState.IN_SYNC
    assert d.attempt.last_event_seq == attempt.last_event_seq  # no seq is used up


def test_running_with_an_idle_turn_is_not_proof_of_running() -> None:
    run, attempt = started()
    d = decide(answer(run, attempt, c.InspectState.RUNNING, turn_active=False), run, attempt, ctx())
    assert d.attempt is not None and d.attempt.status is AttemptStatus.STARTING
    assert display_state(d.run, d.attempt) is DisplayState.WAITING_RUNTIME
    assert [e.type for e in d.events] == ["attempt.inspected"]


def test_finished_applies_the_recorded_result() -> None:
    run, attempt = started(ObservedState.RUNNING)
    d = decide(
        answer(run, attempt, c.InspectState.FINISHED, outcome=c.RuntimeOutcome.FAILED, exit_code=7),
        run,
        attempt,
        ctx(),
    )
    assert d.run.status is RunStatus.FAILED
    assert d.attempt is not None and d.attempt.exit_code == 7
    assert d.attempt.last_event_seq == attempt.last_event_seq


def test_not_found_from_its_own_runtime_is_lost() -> None:
    run, attempt = started(ObservedState.RUNNING)
    d = decide(answer(run, attempt, c.InspectState.NOT_FOUND), run, attempt, ctx())
    assert d.run.status is RunStatus.LOST
    assert d.attempt is not None and d.attempt.status is AttemptStatus.LOST


def test_a_wrong_task_id_is_refused() -> None:
    run, attempt = started()
    bad = c.InspectAnswer(
        run.id,
        RUNTIME,
        attempt_id=attempt.id,
        runtime_task_id="truerun-other",
        state=c.InspectState.NOT_FOUND,
    )
    with pytest.raises(RuntimeTaskMismatch):
        decide(bad, run, attempt, ctx())


def test_an_unstarted_or_finished_attempt_takes_no_answer() -> None:
    created = decide(c.CreateRun(spec()), None, None, ctx())
    assert created.attempt is not None
    with pytest.raises(InvalidTransition):
        decide(
            answer(created.run, created.attempt, c.InspectState.NOT_FOUND),
            created.run,
            created.attempt,
            ctx(),
        )
    run, attempt = started()
    cancelled = decide(c.RequestCancel(run.id, USER), run, attempt, ctx())
    done = decide(
        c.CancelConfirmed(run.id, attempt.id, attempt.runtime_task_id, 1, RUNTIME),
        cancelled.run,
        cancelled.attempt,
        ctx(),
    )
    assert done.attempt is not None
    with pytest.raises(InvalidTransition):
        decide(
            answer(done.run, done.attempt, c.InspectState.RUNNING), done.run, done.attempt, ctx()
        )


def test_never_received_requeues_the_same_attempt_as_a_counted_recovery() -> None:
    run, attempt = started()
    assert attempt.observed_state is ObservedState.UNCONFIRMED and attempt.last_event_seq == 0
    d = decide(answer(run, attempt, c.InspectState.NEVER_RECEIVED), run, attempt, ctx())
    assert d.attempt is not None
    assert d.run.status is RunStatus.QUEUED and d.attempt.status is AttemptStatus.QUEUED
    assert d.attempt.id == attempt.id and d.attempt.attempt_no == attempt.attempt_no
    assert d.attempt.runtime_task_id == attempt.runtime_task_id
    assert (d.attempt.start_requested_at_ms, d.attempt.callback_token_hash) == (None, None)
    assert d.attempt.runtime_instance_id is None and d.attempt.lease_token is None
    assert d.run.recovery_count == run.recovery_count + 1
    assert [e.type for e in d.events] == ["attempt.start_never_received", "run.queued"]
    assert display_state(d.run, d.attempt) is DisplayState.QUEUED


def test_never_received_past_the_recovery_limit_is_dead_lettered() -> None:
    run, attempt = started()
    run = replace(run, recovery_count=2)
    d = decide(
        answer(run, attempt, c.InspectState.NEVER_RECEIVED, max_recoveries=2), run, attempt, ctx()
    )
    assert d.run.status is RunStatus.DEAD_LETTER
    assert [e.type for e in d.events] == ["attempt.start_never_received", "run.dead_lettered"]


def test_never_received_with_a_cancel_requested_is_cancelled() -> None:
    run, attempt = started()
    d = decide(c.RequestCancel(run.id, USER, reason="stop"), run, attempt, ctx())
    run, attempt = d.run, d.attempt or attempt
    d = decide(answer(run, attempt, c.InspectState.NEVER_RECEIVED), run, attempt, ctx())
    assert d.attempt is not None
    assert d.run.status is RunStatus.CANCELLED and d.attempt.status is AttemptStatus.CANCELLED
    assert d.events[0].type == "attempt.start_never_received"


@pytest.mark.parametrize("evidence", ["accepted", "event"])
def test_never_received_after_evidence_proves_nothing_and_counts_as_not_found(
    evidence: str,
) -> None:
    run, attempt = started(ObservedState.RUNNING if evidence == "event" else ObservedState.ACCEPTED)
    if evidence == "accepted":
        d = decide(c.StartAccepted(run.id, RUNTIME, attempt_id=attempt.id), run, attempt, ctx())
        run, attempt = d.run, d.attempt or attempt
    d = decide(answer(run, attempt, c.InspectState.NEVER_RECEIVED), run, attempt, ctx())
    assert d.attempt is not None
    assert d.run.status is RunStatus.LOST and d.attempt.status is AttemptStatus.LOST
    assert d.attempt.termination_reason == "runtime_says_not_found"
