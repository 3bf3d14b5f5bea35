"""Dead letter after too many recoveries, on every store: the reconciler requeues an expired
claim at most ``max_recoveries`` times; the next expiry parks the run in ``dead_letter``
(never claimed), and an operator's requeue puts it back with its count restarted."""

from __future__ import annotations

import pytest

from coordinator.domain import commands as c
from coordinator.domain.display import explain
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType, AttemptStatus, DisplayState, RunStatus
from coordinator.service.transitions import Transitions
from kernel.errors import InvalidTransition
from reconciler.leases import LeaseReconciler
from tests.support.factories import SCHEDULER, spec

OPERATOR = Actor(ActorType.OPERATOR, "ops-jane")
MAX = 2


async def expire_claim(transitions: Transitions, run_id: str) -> dict[str, int]:
    claimed = await transitions.execute(
        c.Claim(run_id, SCHEDULER, runtime_instance_id="i", lease_ttl_ms=1_000)
    )
    assert claimed.attempt is not None and claimed.attempt.lease_expires_at_ms is not None
    expiry = claimed.attempt.lease_expires_at_ms
    scan = LeaseReconciler(transitions, clock=lambda: expiry + 1, max_recoveries=MAX)
    return await scan.run_once()


async def test_too_many_recoveries_dead_letter_the_run_until_an_operator_requeues_it(
    transitions: Transitions,
) -> None:
    run_id = (await transitions.create(spec())).run.id
    for n in range(1, MAX + 1):
        assert (await expire_claim(transitions, run_id))["requeued"] == 1
        loaded = await transitions.reader.load(run_id)
        assert loaded is not None
        assert loaded.run.status is RunStatus.QUEUED and loaded.run.recovery_count == n
    await expire_claim(transitions, run_id)
    loaded = await transitions.reader.load(run_id)
    assert loaded is not None and loaded.attempt is not None
    assert loaded.run.status is RunStatus.DEAD_LETTER
    assert loaded.attempt.status is AttemptStatus.QUEUED  # the same row, released
    assert loaded.run.attempt_count == 1
    shown = explain(loaded.run, loaded.attempt)
    assert shown.state is DisplayState.DEAD_LETTER and f"recovered {MAX} times" in shown.reason
    with pytest.raises(InvalidTransition):  # a dead-lettered run is never claimed
        await transitions.execute(c.Claim(run_id, SCHEDULER, runtime_instance_id="i"))
    events = [e.type for e in await transitions.reader.list_events(run_id, 0, 100)]
    assert events.count("run.dead_lettered") == 1 and events[-1] == "run.dead_lettered"

    requeued = await transitions.execute(c.Requeue(run_id, OPERATOR, reason="runtime fixed"))
    assert requeued.run.status is RunStatus.QUEUED and requeued.run.recovery_count == 0
    reread = await transitions.reader.load(run_id)
    assert reread is not None and reread.run.recovery_count == 0
    assert (await expire_claim(transitions, run_id))["requeued"] == 1  # counting starts again


async def test_an_operator_fails_a_dead_lettered_run(transitions: Transitions) -> None:
    run_id = (await transitions.create(spec())).run.id
    for _ in range(MAX + 1):
        await expire_claim(transitions, run_id)
    failed = await transitions.execute(c.FailRun(run_id, OPERATOR, reason="input is bad"))
    assert failed.run.status is RunStatus.FAILED
    assert failed.attempt is not None and failed.attempt.status is AttemptStatus.CANCELLED
