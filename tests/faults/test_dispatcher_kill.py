"""The coordinator dies after the claim and its start fence committed (one write), before its
Start reaches the runtime: the attempt shows unknown and holds its slot (nothing may be
running, nothing proves it is not). After the restart Inspect asks the runtime, and the truth
is recorded:

- a runtime that cannot prove the Start never came (an agent with a configured instance id)
  answers "not found": lost, never run, never run twice. A person resolves it "not started";
  it then runs once, on a new attempt.
- a runtime that journals every Start it receives (an agent with a generated instance id)
  answers "never received": the same attempt goes back to the queue by itself (seed A §9)
  and runs once.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from truerun.v1 import common_pb2, run_service_pb2

from tests.faults.harness import Cluster, Service, display, gapless, types


def fenced_then_killed(cluster: Cluster, agent: Service) -> tuple[str, str]:
    """A run claimed and fenced whose Start never reaches ``agent``, the coordinator killed
    and restarted, the run unknown holding the slot, and a second run waiting behind it."""
    assert agent.proxy is not None and cluster.server is not None
    cluster.wait_observed(agent)  # its first heartbeat must not be the one the blackhole holds
    # From here on nothing the coordinator sends reaches the agent (and nothing comes back),
    # while its last observation still offers a free slot: the claim and the fence happen,
    # the Start is swallowed.
    agent.proxy.blackhole()
    run_id = cluster.submit("fenced", cluster.side_effect("echo ran"))
    cluster.wait_for(
        run_id,
        lambda r: r.current_attempt.start_request_time.seconds > 0,
        30,
        "the start fence",
    )
    assert display(cluster.get(run_id)) == "starting"
    cluster.kill(cluster.server)
    # Drop the connection and the Start held in it: it never reaches the runtime.
    agent.proxy.reset_connections()

    cluster.restart(cluster.server)
    run = cluster.wait_for(run_id, "unknown", 30)
    assert run.current_attempt.status == common_pb2.ATTEMPT_STATUS_STARTING
    held = cluster.occupancy(agent.instance_id)
    assert held.durable_rows == 1 and held.free_slots == 0, held
    waiting = cluster.submit("waits", cluster.side_effect("echo second"))
    assert display(cluster.get(waiting)) == "queued"
    return run_id, waiting


@pytest.mark.parametrize("topology", ["dev", "split"])
def test_kill_dispatcher_after_fence_before_start(
    make_cluster: Callable[..., Cluster], topology: str
) -> None:
    """dev: ``truerun dev`` is killed; split: ``truerun coordinator`` is, and the capacity
    service (which the occupancy is read from) stays up."""
    cluster = make_cluster(lease_ttl_ms=2500, topology=topology)
    agent = cluster.start_agent("a1", limit=1, through_proxy=True)
    assert agent.proxy is not None
    run_id, waiting = fenced_then_killed(cluster, agent)

    # The runtime comes back: Inspect -> not found on that live instance -> lost, the truth.
    agent.proxy.pass_through()
    run = cluster.wait_for(run_id, "lost", 30)
    attempt = run.current_attempt
    assert attempt.status == common_pb2.ATTEMPT_STATUS_LOST
    assert run.attempt_count == 1
    events = types(cluster.events(run_id))
    assert "attempt.inspected" in events or "attempt.lost" in events, events
    assert "attempt.running" not in events and "attempt.accepted" not in events, events
    assert gapless(cluster.events(run_id))
    # The slot is free again: the next run runs; the lost one never ran at all.
    assert display(cluster.wait_for(waiting, ("succeeded", "failed"), 30)) == "succeeded"
    assert attempt.id not in {s.attempt_id for s in cluster.spans()}
    assert [s.run_id for s in cluster.spans()] == [waiting]

    # Not idempotent, so a person decides: the runtime's log proves it never ran, "not
    # started" queues it on a new attempt, which runs once.
    not_started = run_service_pb2.RESOLUTION_NOT_STARTED
    cluster.resolve(run_id, not_started, "the host's log has no start of it")
    run = cluster.wait_for(run_id, ("succeeded", "failed"), 30)
    assert display(run) == "succeeded" and run.attempt_count == 2
    assert [s.run_id for s in cluster.spans()] == [waiting, run_id]
    assert [s.attempt_id for s in cluster.spans()][1] == run.current_attempt.id
    assert gapless(cluster.events(run_id))


@pytest.mark.parametrize("topology", ["dev", "split"])
def test_a_journaling_runtime_gets_the_same_attempt_back_and_runs_it_once(
    make_cluster: Callable[..., Cluster], topology: str
) -> None:
    cluster = make_cluster(lease_ttl_ms=2500, topology=topology)
    agent = cluster.start_agent("a1", limit=1, through_proxy=True, generated_id=True)
    assert agent.proxy is not None
    run_id, waiting = fenced_then_killed(cluster, agent)
    fenced_attempt = cluster.get(run_id).current_attempt.id

    # The runtime comes back: Inspect -> never received -> the same attempt queued again.
    agent.proxy.pass_through()
    for ended in (run_id, waiting):
        assert display(cluster.wait_for(ended, ("succeeded", "failed"), 45)) == "succeeded"
    run = cluster.get(run_id)
    assert run.attempt_count == 1 and run.current_attempt.id == fenced_attempt
    events = types(cluster.events(run_id))
    assert events.count("attempt.start_never_received") == 1, events
    assert "attempt.lost" not in events and events.count("attempt.start_requested") == 2, events
    assert gapless(cluster.events(run_id))
    # Each ran exactly once, the fenced run on its one attempt.
    assert sorted(s.run_id for s in cluster.spans()) == sorted([run_id, waiting])
    assert fenced_attempt in {s.attempt_id for s in cluster.spans()}
