"""A reference agent SIGKILLed mid-run: restarted, the durable handles and Inspect tell the
truth; never restarted, its runs show unknown and hold their capacity until the lost_after
policy (or a person) decides."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from truerun.v1 import common_pb2, run_service_pb2

from tests.faults.harness import (
    TERMINAL,
    Cluster,
    display,
    gapless,
    overlaps,
    payload,
    starts_per_attempt,
    types,
)
from tests.faults.worker import kill_worker

LEASE_MS = 2500


def test_kill_agent_mid_run_restart_inspect_tells_truth(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(lease_ttl_ms=LEASE_MS)
    agent = cluster.start_agent("a1", limit=2)
    ends_while_down, ends_later = cluster.gate("down"), cluster.gate("later")
    early = cluster.submit(
        "early", cluster.side_effect(f"{cluster.wait_gate(ends_while_down)}; exit 7")
    )
    late = cluster.submit("late", cluster.side_effect(cluster.wait_gate(ends_later)))
    for run_id in (early, late):
        cluster.wait_for(run_id, "running", 30)
    early_attempt = cluster.get(early).current_attempt.id

    cluster.kill(agent)  # the supervisors and commands live on
    for run_id in (early, late):
        run = cluster.wait_for(run_id, "unknown", 30)
        assert run.current_attempt.status == common_pb2.ATTEMPT_STATUS_RUNNING
    held = cluster.occupancy(agent)
    assert held.durable_rows == 2 and held.free_slots == 0, held

    ends_while_down.touch()
    status = cluster.exit_status(agent, early_attempt)
    cluster.eventually(status.exists, 15, "the early command's exit status on disk")
    # No evidence reached truerun: nothing changes, nothing is made up.
    assert [display(cluster.get(r)) for r in (early, late)] == ["unknown", "unknown"]

    cluster.restart(agent)
    run = cluster.wait_for(early, TERMINAL, 30)
    assert display(run) == "failed", cluster.describe()
    assert run.current_attempt.exit_code == 7
    # The late command never stopped: Inspect proves it alive from its durable handle.
    cluster.wait_for(late, "running", 30)
    assert "attempt.inspected" in types(cluster.events(late)), types(cluster.events(late))
    ends_later.touch()
    assert display(cluster.wait_for(late, TERMINAL, 30)) == "succeeded"

    spans = cluster.spans()
    attempts = {cluster.get(r).current_attempt.id for r in (early, late)}
    assert starts_per_attempt(spans) == dict.fromkeys(attempts, 1), spans
    assert not overlaps(spans)
    assert {s.exit_code for s in spans} == {0, 7}
    for run_id in (early, late):
        events = cluster.events(run_id)
        assert gapless(events), types(events)
        assert types(events).count("attempt.running") == 1
        assert cluster.get(run_id).attempt_count == 1


@dataclass(frozen=True)
class TwoRuns:
    """An idempotent run held at a gate and a non-idempotent one, both running on one agent."""

    retried: str
    waiting: str
    gate: Path
    first: dict[str, str]  # run id -> its first attempt id


def _two_runs_running(cluster: Cluster) -> TwoRuns:
    gate = cluster.gate("retry")
    retried = cluster.submit("idem", cluster.side_effect(cluster.wait_gate(gate)), idempotent=True)
    waiting = cluster.submit("once", cluster.side_effect("sleep 600"))
    for run_id in (retried, waiting):
        cluster.wait_for(run_id, "running", 30)
    first = {r: cluster.get(r).current_attempt.id for r in (retried, waiting)}
    return TwoRuns(retried, waiting, gate, first)


def _lost_for(cluster: Cluster, runs: TwoRuns, reason: str) -> None:
    """The non-idempotent run's first attempt is lost, once, for ``reason``."""
    lost = cluster.wait_for(runs.waiting, "lost", 30)
    assert lost.current_attempt.id == runs.first[runs.waiting]
    assert lost.current_attempt.status == common_pb2.ATTEMPT_STATUS_LOST
    lost_events = [e for e in cluster.events(runs.waiting) if e.type == "attempt.lost"]
    assert len(lost_events) == 1 and reason in str(payload(lost_events[0])), lost_events


def _retried_once_and_the_other_waits(cluster: Cluster, runs: TwoRuns) -> None:
    """The idempotent run ran again on a second attempt (opened by the gate) and succeeded;
    the other waits for a person; one start per attempt, nothing overlapping, gapless."""
    run = cluster.wait_for(runs.retried, TERMINAL, 30)
    assert display(run) == "succeeded" and run.attempt_count == 2, display(run)
    assert run.current_attempt.id != runs.first[runs.retried]
    for _ in range(10):
        run = cluster.get(runs.waiting)
        assert display(run) == "lost" and run.attempt_count == 1, display(run)
        time.sleep(0.1)
    spans = cluster.spans()
    counts = starts_per_attempt(spans)
    assert counts[runs.first[runs.waiting]] == 1 and counts[runs.first[runs.retried]] == 1
    assert len(counts) == 3, spans  # the two first attempts and the retry
    assert not overlaps(spans), spans
    for run_id in (runs.retried, runs.waiting):
        assert gapless(cluster.events(run_id))


@pytest.mark.parametrize(
    ("lost_after_ms", "database", "topology"),
    [
        pytest.param(0, "postgres", "dev", id="no-policy-postgres-dev"),
        pytest.param(0, "sqlite", "split", id="no-policy-sqlite-split"),
        pytest.param(3000, "sqlite", "dev", id="lost-after-sqlite-dev"),
        pytest.param(3000, "postgres", "split", id="lost-after-postgres-split"),
    ],
)
def test_kill_agent_never_restart(
    make_cluster: Callable[..., Cluster], lost_after_ms: int, database: str, topology: str
) -> None:
    """The whole worker (agent, supervisors, commands) dies with its machine and never comes
    back (issue #18: on both databases, embedded and split)."""
    cluster = make_cluster(
        database=database, topology=topology, lease_ttl_ms=LEASE_MS, lost_after_ms=lost_after_ms
    )
    agent = cluster.start_agent("a1", limit=2)
    runs = _two_runs_running(cluster)
    retried, waiting = runs.retried, runs.waiting
    kill_worker(cluster, agent)
    killed_at = time.monotonic()

    for run_id in (retried, waiting):
        cluster.wait_for(run_id, "unknown", 30)
    held = cluster.occupancy(agent)
    assert held.durable_rows == 2 and held.free_slots == 0, held

    if not lost_after_ms:
        # No policy: unknown across several lease periods, holding the capacity all along,
        # until a person resolves it with an audited command.
        until = time.monotonic() + 4 * LEASE_MS / 1000
        while time.monotonic() < until:
            for run_id in (retried, waiting):
                run = cluster.get(run_id)
                assert display(run) == "unknown", (display(run), cluster.describe())
                assert run.attempt_count == 1
            time.sleep(0.2)
        assert cluster.occupancy(agent).durable_rows == 2
        for run_id in (retried, waiting):  # the runtime had reported them running
            cluster.resolve(run_id, run_service_pb2.RESOLUTION_FAILED, "host gone for good")
            assert display(cluster.get(run_id)) == "failed"
            resolved = [e for e in cluster.events(run_id) if e.type == "run.resolved"]
            assert len(resolved) == 1 and resolved[0].actor.id == "ops@example"
            assert gapless(cluster.events(run_id))
        assert cluster.occupancy(agent).durable_rows == 0  # the capacity is released
        return

    # lost_after: silent that long after the lease ran out, the attempts are lost by policy.
    _lost_for(cluster, runs, "lost_after_policy")
    assert time.monotonic() - killed_at >= lost_after_ms / 1000
    # The idempotent run got a new attempt; a fresh agent runs it (the first one is dead,
    # its command killed with it: nothing overlaps).
    cluster.wait_for(retried, lambda r: r.attempt_count == 2, 30, "a second attempt")
    runs.gate.touch()
    cluster.start_agent("a2", limit=2)
    _retried_once_and_the_other_waits(cluster, runs)


def test_a_new_instance_of_the_lineage_replaces_a_dead_one(
    make_cluster: Callable[..., Cluster],
) -> None:
    """Issue #5, "a new instance replaced it": an agent of lineage pod-0 dies with its
    commands, as a pod does; a new instance of pod-0 (fresh state, new instance id) says
    Hello. That proves the old one's tasks gone at once, with no lost_after policy: the
    attempts are lost (the reason names both instances), the idempotent run is retried on the
    new instance, the other waits for a person. No command ever ran twice at once."""
    cluster = make_cluster(lease_ttl_ms=LEASE_MS)
    old = cluster.start_agent("pod-0.a", limit=2, lineage="pod-0")
    runs = _two_runs_running(cluster)
    cluster.kill(old)
    cluster.kill_commands(old)
    for run_id in (runs.retried, runs.waiting):  # no proof yet: unknown, holding the capacity
        cluster.wait_for(run_id, "unknown", 30)

    cluster.start_agent("pod-0.b", limit=2, lineage="pod-0")
    _lost_for(cluster, runs, "instance_replaced: pod-0.a by pod-0.b (lineage pod-0)")
    runs.gate.touch()
    _retried_once_and_the_other_waits(cluster, runs)
    assert cluster.get(runs.retried).current_attempt.runtime_instance_id == "pod-0.b"
