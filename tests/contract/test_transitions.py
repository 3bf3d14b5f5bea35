"""The transition service contract (seed B §21, seed A §14), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from coordinator.dispatch.retries import RetryScheduler
from coordinator.domain import commands as c
from coordinator.domain.decide import Context, decide
from coordinator.domain.display import display_state
from coordinator.domain.states import AttemptStatus, DisplayState, RunStatus, ScopePolicy
from coordinator.service.transitions import DEDUPLICATED, Transitions
from coordinator.store.base import CasMiss, DedupeKeyTaken, RunFilter, RunReader, RunStore
from kernel.errors import (
    ExecutionScopeBusy,
    IdempotencyKeyConflict,
    InvalidTransition,
    RunNotFound,
    RuntimeTaskMismatch,
    VersionConflict,
)
from kernel.ids import new_token, now_ms, uuid7
from reconciler.leases import LeaseReconciler
from tests.support.factories import RUNTIME, SCHEDULER, USER, evidence, spec, started
from tests.support.snapshot import snapshot


async def test_same_trigger_twice_creates_one_run(transitions: Transitions) -> None:
    """§21.1: a repeated delivery with the same idempotency key returns the first run."""
    key = "trigger-7:2026-11-29T00:00"
    first = await transitions.create(spec(idempotency_key=key))
    second = await transitions.create(spec(idempotency_key=key))
    assert second.existing and second.run.id == first.run.id
    assert not first.existing
    runs = await transitions.reader.list_runs(RunFilter(project_id="proj"), None, 10)
    assert [r.run.id for r in runs] == [first.run.id]
    with pytest.raises(IdempotencyKeyConflict) as raised:
        await transitions.create(spec(idempotency_key=key), use_existing=False)
    assert raised.value.metadata["existing_run_id"] == first.run.id


async def test_concurrent_creates_with_one_key_make_one_run(transitions: Transitions) -> None:
    results = await asyncio.gather(
        *(transitions.create(spec(idempotency_key="burst")) for _ in range(8))
    )
    assert len({r.run.id for r in results}) == 1
    assert sum(not r.existing for r in results) == 1


async def test_two_transitions_on_one_version_one_wins(transitions: Transitions) -> None:
    """§21.2: two commands against the same version: one commits, the other conflicts."""
    created = await transitions.create(spec())
    version = created.run.version
    outcomes = await asyncio.gather(
        transitions.execute(c.Claim(created.run.id, SCHEDULER, version, runtime_instance_id="a")),
        transitions.execute(c.RequestCancel(created.run.id, USER, version)),
        return_exceptions=True,
    )
    conflicts = [o for o in outcomes if isinstance(o, VersionConflict)]
    wins = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(conflicts) == 1 and len(wins) == 1
    events = await transitions.reader.list_events(created.run.id, 0, 100)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert len(events) == 2 + len(wins[0].events)


async def test_failed_run_cas_appends_no_event(
    transitions: Transitions,
    store: RunStore,
) -> None:
    """§21.3: when the run compare-and-set misses, no event is written."""
    created = await transitions.create(spec())
    loaded = await transitions.reader.load(created.run.id)
    assert loaded is not None
    decision = decide(
        c.Claim(created.run.id, SCHEDULER, runtime_instance_id="a"),
        replace(loaded.run, version=loaded.run.version + 5),
        loaded.attempt,
        Context(now_ms(), uuid7, new_token),
    )
    with pytest.raises(CasMiss):
        await store.apply(decision, None, None)
    events = await transitions.reader.list_events(created.run.id, 0, 100)
    assert [e.type for e in events] == ["run.created", "run.queued"]
    after = await transitions.reader.load(created.run.id)
    assert after is not None and after.run == loaded.run and after.attempt == loaded.attempt


async def test_failed_event_append_commits_no_state(
    transitions: Transitions, store: RunStore, migrated_database_url: str
) -> None:
    """§21.4: when the event append fails, the run and attempt changes roll back too."""
    created = await transitions.create(spec())
    run_id = created.run.id
    await transitions.execute(c.Claim(run_id, SCHEDULER, runtime_instance_id="a", dedupe_key="k"))
    before = await snapshot(migrated_database_url)
    loaded = await transitions.reader.load(run_id)
    assert loaded is not None
    decision = decide(
        c.ReleaseBeforeFence(run_id, SCHEDULER),
        loaded.run,
        loaded.attempt,
        Context(now_ms(), uuid7, new_token),
    )
    with pytest.raises(DedupeKeyTaken):  # the dedupe key is taken: the event insert fails
        await store.apply(decision, "k", None)
    assert await snapshot(migrated_database_url) == before


async def test_repeated_dedupe_key_returns_current_state(transitions: Transitions) -> None:
    created = await transitions.create(spec())
    claim = c.Claim(created.run.id, SCHEDULER, runtime_instance_id="a", dedupe_key="claim-1")
    first = await transitions.execute(claim)
    again = await transitions.execute(claim)
    assert again.outcome == DEDUPLICATED
    assert again.run == first.run
    events = await transitions.reader.list_events(created.run.id, 0, 100)
    assert [e.dedupe_key for e in events].count("claim-1") == 1


async def test_success_callback_twice_gives_one_terminal_state(transitions: Transitions) -> None:
    """§21.5: a repeated success callback is recorded as ignored; the state changes once."""
    _, attempt = await started(transitions)
    done = c.RuntimeResult
    first = await transitions.execute(evidence(done, attempt, 1, exit_code=0))
    second = await transitions.execute(evidence(done, attempt, 1, exit_code=0))
    third = await transitions.execute(evidence(done, attempt, 2, exit_code=0))
    assert first.run.status is RunStatus.SUCCEEDED
    assert second.outcome == third.outcome == "ignored"
    assert second.run.version == third.run.version == first.run.version
    events = await transitions.reader.list_events(attempt.run_id, 0, 100)
    types = [e.type for e in events]
    assert types.count("attempt.succeeded") == 1 and types.count("run.succeeded") == 1
    assert types.count("attempt.late_callback_ignored") == 2
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-first", "exit-first"])
async def test_cancel_and_exit_zero_race(transitions: Transitions, cancel_first: bool) -> None:
    """§21.6: the first commit wins; a late exit 0 after a committed cancel ends cancelled."""
    _, attempt = await started(transitions)
    run_id = attempt.run_id
    await transitions.execute(evidence(c.RuntimeRunning, attempt, 1))
    exit_zero = evidence(c.RuntimeResult, attempt, 2, exit_code=0)
    cancel = c.RequestCancel(run_id, USER)
    if cancel_first:
        requested = await transitions.execute(cancel)
        assert display_state(requested.run, requested.attempt) is DisplayState.CANCELLING
        final = await transitions.execute(exit_zero)
        assert final.run.status is RunStatus.CANCELLED
        assert final.attempt is not None and final.attempt.status is AttemptStatus.CANCELLED
        assert final.attempt.exit_code == 0  # the evidence is kept, the intent wins
    else:
        await transitions.execute(exit_zero)
        late = await transitions.execute(cancel)
        assert late.outcome == "already_terminal" and late.run.status is RunStatus.SUCCEEDED
        events = await transitions.reader.list_events(run_id, 0, 100)
        assert "run.cancel_requested" not in [e.type for e in events]


async def test_concurrent_cancel_and_exit_zero(transitions: Transitions) -> None:
    _, attempt = await started(transitions)
    await transitions.execute(evidence(c.RuntimeRunning, attempt, 1))
    await asyncio.gather(
        transitions.execute(c.RequestCancel(attempt.run_id, USER)),
        transitions.execute(evidence(c.RuntimeResult, attempt, 2, exit_code=0)),
    )
    loaded = await transitions.reader.load(attempt.run_id)
    assert loaded is not None and loaded.run.status.terminal
    events = [e.type for e in await transitions.reader.list_events(attempt.run_id, 0, 100)]
    # Whichever committed first decides: a committed cancel request turns the exit into
    # "cancelled"; a committed exit makes the cancel a no-op that leaves no event.
    if "run.cancel_requested" in events:
        assert loaded.run.status is RunStatus.CANCELLED
    else:
        assert loaded.run.status is RunStatus.SUCCEEDED
    assert events.count("run.succeeded") + events.count("run.cancelled") == 1


async def test_automatic_retry_makes_a_new_attempt(transitions: Transitions) -> None:
    """§21.7 and seed A "Runtime failed + retry": old row failed, new row queued, same run."""
    _, attempt = await started(transitions, max_attempts=2)
    failed = await transitions.execute(
        evidence(c.RuntimeResult, attempt, 1, outcome=c.RuntimeOutcome.FAILED, exit_code=3)
    )
    assert failed.run.status is RunStatus.RETRY_WAIT
    retried = await transitions.execute(c.RetryAttempt(attempt.run_id, SCHEDULER))
    assert retried.run.id == attempt.run_id and retried.run.status is RunStatus.QUEUED
    attempts = await transitions.reader.list_attempts(attempt.run_id)
    assert [(a.attempt_no, a.status) for a in attempts] == [
        (1, AttemptStatus.FAILED),
        (2, AttemptStatus.QUEUED),
    ]
    old, new = attempts
    assert old.exit_code == 3 and old.runtime_task_id != new.runtime_task_id
    assert new.previous_attempt_id == old.id
    assert failed.attempt is not None and old == failed.attempt  # never rewritten


async def test_failure_without_budget_fails_the_run(transitions: Transitions) -> None:
    _, attempt = await started(transitions, max_attempts=1)
    result = await transitions.execute(
        evidence(c.RuntimeResult, attempt, 1, outcome=c.RuntimeOutcome.FAILED, exit_code=1)
    )
    assert result.run.status is RunStatus.FAILED
    with pytest.raises(InvalidTransition):
        await transitions.execute(c.RetryAttempt(attempt.run_id, SCHEDULER))


async def test_manual_retry_creates_a_new_run(transitions: Transitions) -> None:
    """§21.8: a person's retry is a new run that points at the original, which stays as is."""
    created = await transitions.create(spec())
    cancelled = await transitions.execute(c.RequestCancel(created.run.id, USER))
    retry = await transitions.execute(c.ManualRetry(created.run.id, USER))
    assert retry.run.id != created.run.id
    assert retry.run.retry_of_run_id == created.run.id
    assert retry.run.status is RunStatus.QUEUED
    original = await transitions.reader.load(created.run.id)
    assert original is not None and original.run == cancelled.run


async def test_runtime_task_id_is_checked(transitions: Transitions) -> None:
    _, attempt = await started(transitions)
    wrong = c.RuntimeRunning(attempt.run_id, attempt.id, "truerun-someone-else", 1, RUNTIME)
    with pytest.raises(RuntimeTaskMismatch):
        await transitions.execute(wrong)
    loaded = await transitions.reader.load(attempt.run_id)
    assert loaded is not None and loaded.attempt == attempt


async def test_unknown_run_is_not_found(transitions: Transitions) -> None:
    with pytest.raises(RunNotFound):
        await transitions.execute(c.RequestCancel(uuid7(), USER))


async def test_payloads_hold_no_secrets(transitions: Transitions) -> None:
    """§21.12: secrets and full logs never reach events or the stored error summary."""
    _, attempt = await started(transitions)
    log = "line\n" * 5000
    summary = f"exit 1: password=hunter2 token: ghp_{'a' * 36} Bearer abcdefghijklmnop {log}"
    result = await transitions.execute(
        evidence(
            c.RuntimeResult,
            attempt,
            1,
            outcome=c.RuntimeOutcome.FAILED,
            exit_code=1,
            error_summary=summary,
        )
    )
    assert result.run.error_summary is not None
    for text in [result.run.error_summary] + [
        str(e.payload) for e in await transitions.reader.list_events(attempt.run_id, 0, 100)
    ]:
        assert "hunter2" not in text and "ghp_" not in text and "abcdefghijklmnop" not in text
        assert len(text) <= 4096
    cancelled = await transitions.execute(
        c.RequestCancel(
            (await transitions.create(spec())).run.id, USER, reason="api_key=sk-" + "x" * 30
        )
    )
    assert cancelled.run.cancel_reason is not None and "sk-" not in cancelled.run.cancel_reason


async def test_reads_change_nothing(transitions: Transitions, migrated_database_url: str) -> None:
    """Seed A "GET / refresh": reading never writes."""
    _, attempt = await started(transitions)
    await transitions.execute(evidence(c.RuntimeRunning, attempt, 1))
    await transitions.create(spec(requires_approval=True))
    before = await snapshot(migrated_database_url)
    store: RunReader = transitions.reader
    for _ in range(50):
        listed = await store.list_runs(RunFilter(), None, 50)
        for loaded in listed:
            await store.load(loaded.run.id)
            await store.list_events(loaded.run.id, 0, 100)
            await store.list_attempts(loaded.run.id)
            await store.queue_position(loaded.run)
    assert await snapshot(migrated_database_url) == before


async def test_scope_policy_reject_new(transitions: Transitions) -> None:
    first = await transitions.create(spec(execution_scope="repo-1"))
    with pytest.raises(ExecutionScopeBusy) as raised:
        await transitions.create(
            spec(execution_scope="repo-1", scope_policy=ScopePolicy.REJECT_NEW)
        )
    assert raised.value.metadata["run_id"] == first.run.id
    runs = await transitions.reader.list_runs(RunFilter(project_id="proj"), None, 10)
    assert [r.run.id for r in runs] == [first.run.id]
    await transitions.execute(c.RequestCancel(first.run.id, USER))
    second = await transitions.create(
        spec(execution_scope="repo-1", scope_policy=ScopePolicy.REJECT_NEW)
    )
    assert second.run.status is RunStatus.QUEUED


async def test_scope_policy_cancel_in_progress(transitions: Transitions) -> None:
    queued = await transitions.create(spec(execution_scope="repo-2"))
    _, live = await started(transitions, execution_scope="repo-2")
    newest = await transitions.create(
        spec(execution_scope="repo-2", scope_policy=ScopePolicy.CANCEL_IN_PROGRESS)
    )
    assert newest.run.status is RunStatus.QUEUED
    before_fence = await transitions.reader.load(queued.run.id)
    after_fence = await transitions.reader.load(live.run_id)
    assert before_fence is not None and before_fence.run.status is RunStatus.CANCELLED
    assert after_fence is not None
    assert display_state(after_fence.run, after_fence.attempt) is DisplayState.CANCELLING
    events = await transitions.reader.list_events(live.run_id, 0, 100)
    assert events[-1].type == "run.cancel_requested"
    assert events[-1].payload["reason"] == "superseded_in_scope"


async def test_retry_scheduler_requeues_after_the_backoff(transitions: Transitions) -> None:
    _, attempt = await started(transitions, max_attempts=2)
    failed = await transitions.execute(
        evidence(c.RuntimeResult, attempt, 1, outcome=c.RuntimeOutcome.FAILED, exit_code=1)
    )
    now = failed.run.updated_at_ms
    early = RetryScheduler(transitions, backoff_ms=60_000, clock=lambda: now + 1_000)
    assert await early.run_once() == 0
    due = RetryScheduler(transitions, backoff_ms=60_000, clock=lambda: now + 61_000)
    assert await due.run_once() == 1
    loaded = await transitions.reader.load(attempt.run_id)
    assert loaded is not None and loaded.run.status is RunStatus.QUEUED
    assert loaded.attempt is not None and loaded.attempt.attempt_no == 2
    assert await due.run_once() == 0  # nothing is retried twice


async def test_expired_claim_before_the_fence_goes_back_to_the_queue(
    transitions: Transitions,
) -> None:
    created = await transitions.create(spec())
    claimed = await transitions.execute(
        c.Claim(created.run.id, SCHEDULER, runtime_instance_id="i", lease_ttl_ms=1_000)
    )
    assert claimed.attempt is not None and claimed.attempt.lease_expires_at_ms is not None
    expiry = claimed.attempt.lease_expires_at_ms
    assert await LeaseReconciler(transitions, clock=lambda: expiry - 1).run_once() == {
        "requeued": 0,
        "unknown": 0,
    }
    after = LeaseReconciler(transitions, clock=lambda: expiry + 1)
    assert await after.run_once() == {"requeued": 1, "unknown": 0}
    attempts = await transitions.reader.list_attempts(created.run.id)
    assert [(a.attempt_no, a.status) for a in attempts] == [(1, AttemptStatus.QUEUED)]
    loaded = await transitions.reader.load(created.run.id)
    assert loaded is not None and loaded.run.status is RunStatus.QUEUED
    assert loaded.run.attempt_count == 1  # the retry budget is untouched


async def test_heartbeats_never_keep_an_unfenced_claim_alive(transitions: Transitions) -> None:
    """A dispatcher SIGKILLed between claim and fence leaves a claim the runtime never heard
    of; the runtime's heartbeats must not renew it, or it would stay dispatching for ever
    (tests/multi/test_multi_replica.py found two such runs)."""
    created = await transitions.create(spec())
    claimed = await transitions.execute(
        c.Claim(created.run.id, SCHEDULER, runtime_instance_id="i", lease_ttl_ms=1_000)
    )
    assert claimed.attempt is not None and claimed.attempt.lease_expires_at_ms is not None
    expiry = claimed.attempt.lease_expires_at_ms
    renewed = await transitions.renew_leases(
        claimed.attempt.owner_id, "i", [claimed.attempt.id], expiry - 1, expiry + 60_000
    )
    assert renewed == 0
    after = LeaseReconciler(transitions, clock=lambda: expiry + 1)
    assert await after.run_once() == {"requeued": 1, "unknown": 0}


async def test_expired_lease_after_the_fence_is_unknown_and_holds_capacity(
    transitions: Transitions,
) -> None:
    _, attempt = await started(transitions)
    assert attempt.lease_expires_at_ms is not None
    later = LeaseReconciler(transitions, clock=lambda: attempt.lease_expires_at_ms + 1)  # type: ignore[operator]
    assert await later.run_once() == {"requeued": 0, "unknown": 1}
    loaded = await transitions.reader.load(attempt.run_id)
    assert loaded is not None and loaded.attempt is not None
    assert display_state(loaded.run, loaded.attempt) is DisplayState.UNKNOWN
    assert loaded.attempt.status is AttemptStatus.STARTING  # still live: capacity is held
    assert await later.run_once() == {"requeued": 0, "unknown": 0}  # nothing twice


async def test_a_transition_keeps_a_lease_renewed_meanwhile(
    transitions: Transitions,
    store: RunStore,
) -> None:
    """A heartbeat's renewal that lands between a command's read and its write survives."""
    _, attempt = await started(transitions)
    assert attempt.lease_expires_at_ms is not None
    loaded = await transitions.reader.load(attempt.run_id)
    assert loaded is not None
    renewed_until = attempt.lease_expires_at_ms + 60_000
    await transitions.renew_leases(
        attempt.owner_id, "inst-1", [attempt.id], attempt.lease_expires_at_ms, renewed_until
    )
    decision = decide(  # decided on the state read before the renewal
        evidence(c.RuntimeRunning, attempt, 1),
        loaded.run,
        loaded.attempt,
        Context(now_ms(), uuid7, new_token),
    )
    await store.apply(decision, None, None)
    after = await transitions.reader.load(attempt.run_id)
    assert after is not None and after.attempt is not None
    assert after.attempt.status is AttemptStatus.RUNNING
    assert after.attempt.lease_expires_at_ms == renewed_until
    assert after.attempt.heartbeat_at_ms == attempt.lease_expires_at_ms


async def test_a_batch_of_writes_is_all_or_nothing(
    transitions: Transitions, store: RunStore, migrated_database_url: str
) -> None:
    """apply_all (runtime event batches): one stale decision and none of the batch lands."""
    _, first = await started(transitions, task_id="one")
    _, second = await started(transitions, task_id="two")
    ctx = Context(now_ms(), uuid7, new_token)
    decisions = []
    for attempt in (first, second):
        loaded = await transitions.reader.load(attempt.run_id)
        assert loaded is not None
        decisions.append(
            decide(evidence(c.RuntimeRunning, attempt, 1), loaded.run, loaded.attempt, ctx)
        )
    await transitions.execute(evidence(c.RuntimeAccepted, second, 1))  # the second moves on
    before = await snapshot(migrated_database_url)
    with pytest.raises(CasMiss):
        await store.apply_all(decisions)
    assert await snapshot(migrated_database_url) == before
    written = await store.apply_all(decisions[:1])
    assert written[0].run.status is RunStatus.RUNNING
    assert [e.type for e in written[0].events] == ["attempt.running", "run.running"]


async def test_a_batch_misses_when_an_event_was_appended_since_the_read(
    transitions: Transitions, store: RunStore, migrated_database_url: str
) -> None:
    """apply_all numbers each run's new events from the event sequence its decision was made
    on: a note appended meanwhile (the run's version unchanged) makes the batch miss, nothing
    of it lands, and the decision made again on fresh state follows the note."""
    _, attempt = await started(transitions)
    loaded = await transitions.reader.load(attempt.run_id)
    assert loaded is not None
    ctx = Context(now_ms(), uuid7, new_token)
    stale = decide(evidence(c.RuntimeRunning, attempt, 1), loaded.run, loaded.attempt, ctx)
    note = c.NoteRun(attempt.run_id, SCHEDULER, type="activation.classified", details={})
    noted = await transitions.execute(note)
    assert noted.run.version == loaded.run.version  # only the event sequence moved
    before = await snapshot(migrated_database_url)
    with pytest.raises(CasMiss):
        await store.apply_all([stale])
    assert await snapshot(migrated_database_url) == before
    fresh = await transitions.reader.load(attempt.run_id)
    assert fresh is not None
    again = decide(evidence(c.RuntimeRunning, attempt, 1), fresh.run, fresh.attempt, ctx)
    (written,) = await store.apply_all([again])
    events = await transitions.reader.list_events(attempt.run_id, 0, 100)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events[-3:]] == [
        "activation.classified",
        *[e.type for e in written.events],
    ]
    assert written.run.event_sequence == len(events)


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
async def test_lost_after_policy_declares_silent_unknowns_lost(
    transitions: Transitions, idempotent: bool
) -> None:
    _, attempt = await started(transitions, idempotent=idempotent)
    assert attempt.lease_expires_at_ms is not None
    expiry = attempt.lease_expires_at_ms
    never = LeaseReconciler(transitions, clock=lambda: expiry + 3_600_000)
    assert (await never.run_once())["unknown"] == 1  # without a policy: unknown, forever
    assert "lost" not in await never.run_once()
    early = LeaseReconciler(transitions, clock=lambda: expiry + 5_000, lost_after_ms=10_000)
    assert (await early.run_once())["lost"] == 0
    late = LeaseReconciler(transitions, clock=lambda: expiry + 11_000, lost_after_ms=10_000)
    assert (await late.run_once())["lost"] == 1
    loaded = await transitions.reader.load(attempt.run_id)
    attempts = await transitions.reader.list_attempts(attempt.run_id)
    assert loaded is not None
    assert attempts[0].status is AttemptStatus.LOST
    assert attempts[0].termination_reason is not None
    assert attempts[0].termination_reason.startswith("lost_after_policy")
    if idempotent:  # a new attempt, the lost one kept
        assert loaded.run.status is RunStatus.QUEUED and len(attempts) == 2
    else:  # a person decides
        assert loaded.run.status is RunStatus.LOST and len(attempts) == 1
