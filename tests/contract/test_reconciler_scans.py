"""The reconciler's scans with several replicas, and the no-output cancel (issue #5)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

from coordinator.domain import commands as c
from coordinator.domain.states import ActorType, AttemptStatus, RunStatus, SyncState
from coordinator.service.transitions import Transitions
from coordinator.store.base import RunStore
from kernel.ids import now_ms
from reconciler.leases import LeaseReconciler
from services.bootstrap import open_store
from tests.support.factories import RUNTIME, SCHEDULER, evidence, spec, started

RUNS = 200


def _counting(tally: Counter[str]) -> Callable[[str], None]:
    return lambda outcome: tally.update([outcome])


async def _expired_work(transitions: Transitions) -> list[str]:
    """Half claimed (not fenced), half fenced: all with leases that run out."""
    run_ids = []
    for i in range(RUNS):
        if i % 2:
            created = await transitions.create(spec())
            await transitions.execute(
                c.Claim(created.run.id, SCHEDULER, runtime_instance_id="i", lease_ttl_ms=1_000)
            )
            run_ids.append(created.run.id)
        else:
            _, attempt = await started(transitions)
            run_ids.append(attempt.run_id)
    return run_ids


async def test_two_replicas_split_the_expired_leases_and_act_once_each(
    migrated_database_url: str,
) -> None:
    if not migrated_database_url.startswith("postgres"):
        pytest.skip("SQLite is one process: there is no second replica to split with")
    stores: list[RunStore] = [await open_store(migrated_database_url) for _ in range(3)]
    try:
        run_ids = await _expired_work(Transitions(stores[0]))
        later = now_ms() + 3_600_000
        done: list[Counter[str]] = [Counter(), Counter()]
        replicas = [
            LeaseReconciler(
                Transitions(store),
                clock=lambda: later,
                on_action=_counting(tally),
            )
            for store, tally in zip(stores[1:], done, strict=True)
        ]
        counts = await asyncio.gather(*(r.run_once(limit=RUNS) for r in replicas))
        assert sum(n["requeued"] for n in counts) == RUNS // 2
        assert sum(n["unknown"] for n in counts) == RUNS // 2
        for tally in done:  # both replicas did some of the work
            assert tally["requeued"] + tally["unknown"] > 0, done
        for run_id in run_ids:  # exactly one reconciler action per run
            events = await stores[0].list_events(run_id, 0, 100)
            mine = [e.type for e in events if e.actor.type is ActorType.RECONCILER]
            assert mine and len(mine) == len(set(mine)), (run_id, mine)
        again = await replicas[0].run_once(limit=RUNS)  # nothing left, nothing twice
        assert again == {"requeued": 0, "unknown": 0}
    finally:
        for store in stores:
            await store.close()


async def _running(transitions: Transitions) -> tuple[str, int]:
    _, attempt = await started(transitions)
    result = await transitions.execute(evidence(c.RuntimeRunning, attempt, 1))
    assert result.attempt is not None and result.attempt.observed_at_ms is not None
    return attempt.run_id, result.attempt.observed_at_ms


async def test_no_output_past_the_threshold_requests_a_cancel(transitions: Transitions) -> None:
    run_id, observed = await _running(transitions)
    scan = LeaseReconciler(
        transitions, clock=lambda: observed + 10_001, no_output_cancel_after_ms=10_000
    )
    assert (await scan.run_once())["cancelled"] == 1
    loaded = await transitions.reader.load(run_id)
    assert loaded is not None and loaded.attempt is not None
    assert loaded.run.status is RunStatus.RUNNING  # cancelling: never a made-up failed
    assert loaded.run.cancel_requested_at_ms is not None
    assert loaded.attempt.status is AttemptStatus.RUNNING
    events = await transitions.reader.list_events(run_id, 0, 100)
    requested = [e for e in events if e.type == "run.cancel_requested"]
    assert len(requested) == 1
    assert requested[0].actor.type is ActorType.RECONCILER
    assert requested[0].payload["reason"] == "no output for 10000 ms"
    assert (await scan.run_once())["cancelled"] == 0  # asked once
    # the runtime confirms: the run ends cancelled
    confirmed = evidence(c.RuntimeResult, loaded.attempt, 2, outcome=c.RuntimeOutcome.CANCELLED)
    assert (await transitions.execute(confirmed)).run.status is RunStatus.CANCELLED


async def test_an_unknown_attempt_is_not_taken_for_a_quiet_one(transitions: Transitions) -> None:
    """Its silence is the runtime's (unreachable), not the task's: no cancel is made up from
    it; once the runtime is heard again (Inspect: running) the quiet time counts anew."""
    run_id, observed = await _running(transitions)
    scan = LeaseReconciler(
        transitions, clock=lambda: observed + 10_001, no_output_cancel_after_ms=10_000
    )
    await transitions.execute(c.DispatchUnknown(run_id, SCHEDULER, reason="lease_expired"))
    assert (await scan.run_once())["cancelled"] == 0
    loaded = await transitions.reader.load(run_id)
    assert loaded is not None and loaded.attempt is not None
    assert loaded.attempt.sync_state is SyncState.STALE
    assert loaded.run.cancel_requested_at_ms is None

    answer = c.InspectAnswer(
        run_id,
        RUNTIME,
        attempt_id=loaded.attempt.id,
        runtime_task_id=loaded.attempt.runtime_task_id,
        state=c.InspectState.RUNNING,
        turn_active=True,
    )
    heard = (await transitions.execute(answer)).attempt
    assert heard is not None and heard.sync_state is SyncState.IN_SYNC
    assert heard.observed_at_ms is not None
    again = heard.observed_at_ms
    quiet = LeaseReconciler(
        transitions, clock=lambda: again + 9_000, no_output_cancel_after_ms=10_000
    )
    assert (await quiet.run_once())["cancelled"] == 0
    quiet = LeaseReconciler(
        transitions, clock=lambda: again + 10_001, no_output_cancel_after_ms=10_000
    )
    assert (await quiet.run_once())["cancelled"] == 1


async def test_recent_output_is_left_alone(transitions: Transitions) -> None:
    run_id, observed = await _running(transitions)
    scan = LeaseReconciler(
        transitions, clock=lambda: observed + 9_000, no_output_cancel_after_ms=10_000
    )
    assert (await scan.run_once())["cancelled"] == 0
    loaded = await transitions.reader.load(run_id)
    assert loaded is not None and loaded.run.cancel_requested_at_ms is None


async def test_no_output_cancel_is_off_by_default(transitions: Transitions) -> None:
    run_id, observed = await _running(transitions)
    scan = LeaseReconciler(transitions, clock=lambda: observed + 20_000)
    assert "cancelled" not in await scan.run_once()
    loaded = await transitions.reader.load(run_id)
    assert loaded is not None and loaded.run.cancel_requested_at_ms is None
    events = await transitions.reader.list_events(run_id, 0, 100)
    assert not [e for e in events if e.type == "run.cancel_requested"]
