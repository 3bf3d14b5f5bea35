"""The coordinator dies after the start fence and its Start dies with it, but the runtime is
back before the lease runs out (found while building the soak and the cancel-phase tests).

Nothing then made truerun ask the runtime about that attempt: it never went stale (the
runtime's heartbeats renew the leases of every started attempt of the instance, including
one it never heard of) and the new dispatcher inspected only stale attempts on reconnect.
The run showed ``starting`` for ever and held its slot for ever, so a runtime with D = 1
never got another run. Now the reconnect inspects every started attempt whose Start the
runtime never confirmed: the runtime answers not found, the attempt is lost, the slot free.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.faults.harness import Cluster, display

LEASE_MS = 20_000  # longer than a coordinator restart plus the runtime's reconnect


def test_start_lost_with_the_coordinator_is_found_out_on_reconnect(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(lease_ttl_ms=LEASE_MS)
    agent = cluster.start_agent("a", limit=1, through_proxy=True)
    assert agent.proxy is not None and cluster.server is not None
    cluster.eventually(lambda: cluster.occupancy(agent).observation_fresh, 30, "an observation")
    agent.proxy.blackhole()  # the Start will be held, then dropped
    run_id = cluster.submit("lost-start", cluster.side_effect("echo ran"))
    cluster.wait_for(
        run_id, lambda r: r.current_attempt.start_request_time.seconds > 0, 30, "the fence"
    )
    cluster.kill(cluster.server)
    agent.proxy.reset_connections()  # the Start never reaches the runtime
    agent.proxy.pass_through()
    cluster.restart(cluster.server)

    # Well inside the lease: the reconnected runtime is asked and says it never had it.
    run = cluster.wait_for(run_id, ("lost", "unknown"), LEASE_MS / 2000, "the truth asked for")
    assert display(run) == "lost", run.display_reason
    second = cluster.submit("next", cluster.side_effect("echo next"))
    assert display(cluster.wait_for(second, ("succeeded", "failed"), 30)) == "succeeded"
    assert [s.run_id for s in cluster.spans()] == [second]
