"""The coordinator dies after the start fence, before its Start reaches the runtime: the
attempt shows unknown and holds its slot (nothing may be running, nothing proves it is not);
after the restart Inspect asks the runtime, which never heard of it, and the truth is
recorded: lost, never run, never run twice. A person resolves it "not started"; it then
runs once, on a new attempt."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from truerun.v1 import common_pb2, run_service_pb2

from tests.faults.harness import Cluster, display, gapless, types


@pytest.mark.parametrize("topology", ["dev", "split"])
def test_kill_dispatcher_after_fence_before_start(
    make_cluster: Callable[..., Cluster], topology: str
) -> None:
    """dev: ``truerun dev`` is killed; split: ``truerun coordinator`` is, and the capacity
    service (which the occupancy is read from) stays up."""
    cluster = make_cluster(lease_ttl_ms=2500, topology=topology)
    agent = cluster.start_agent("a1", limit=1, through_proxy=True)
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
    held = cluster.occupancy(agent)
    assert held.durable_rows == 1 and held.free_slots == 0, held
    waiting = cluster.submit("waits", cluster.side_effect("echo second"))
    assert display(cluster.get(waiting)) == "queued"

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
