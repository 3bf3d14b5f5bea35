"""A dispatcher claims an attempt through the public CapacityService and dies before the
start fence: nothing can have started, so when the lease runs out the reconciler process puts
the same attempt row back in the queue, retry budget untouched, and a real agent then runs
that very attempt once."""

from __future__ import annotations

from collections.abc import Callable

from truerun.v1 import capacity_service_pb2 as cpb
from truerun.v1 import common_pb2

from tests.faults.harness import OWNER, TERMINAL, Cluster, display, gapless, payload, types

GHOST = "ghost-dispatcher"


def test_lease_expired_before_fence_requeues_same_row(
    make_cluster: Callable[..., Cluster],
) -> None:
    # The coordinator's own lease scan runs too, but the reconciler is a process of its own:
    # either may act, each by compare-and-set; the test only reads the API.
    cluster = make_cluster(lease_ttl_ms=2000)
    run_id = cluster.submit(
        "claimed-then-abandoned", cluster.side_effect("echo once"), max_attempts=3
    )
    capacity = cluster.api.service  # as a dispatcher would: the service identity
    capacity.ReportObservation(
        cpb.ReportObservationRequest(
            observation=cpb.Observation(
                owner_id=OWNER,
                runtime_instance_id=GHOST,
                routes=[cpb.Route(device_id=GHOST, kind="stream")],
                limit=1,
                active=0,
            )
        ),
        timeout=10,
    )
    claimed = capacity.Claim(
        cpb.ClaimRequest(
            owner_id=OWNER,
            runtime_instance_id=GHOST,
            device_id=GHOST,
            max_attempts=1,
            lease_ttl_ms=2000,
            served_project_ids=["*"],
        ),
        timeout=10,
    )
    assert [c.run_id for c in claimed.claimed] == [run_id], claimed
    attempt_id = claimed.claimed[0].attempt_id
    run = cluster.get(run_id)
    assert display(run) == "starting" and run.current_attempt.id == attempt_id
    assert run.current_attempt.status == common_pb2.ATTEMPT_STATUS_CLAIMED
    # ... and the claimer is gone: no fence, no Start, no heartbeat.

    run = cluster.wait_for(run_id, "queued", 30)
    assert run.current_attempt.id == attempt_id, "the same attempt row is queued again"
    assert run.current_attempt.attempt_no == 1
    assert run.attempt_count == 1 and run.max_attempts == 3
    assert not run.current_attempt.runtime_instance_id
    released = [e for e in cluster.events(run_id) if e.type == "attempt.released"]
    assert len(released) == 1
    assert payload(released[0]).get("reason") == "lease_expired_before_start", payload(released[0])

    agent = cluster.start_agent("a1", limit=1)
    run = cluster.wait_for(run_id, TERMINAL, 30)
    assert display(run) == "succeeded"
    assert run.current_attempt.id == attempt_id and run.attempt_count == 1
    assert run.current_attempt.runtime_instance_id == agent.instance_id
    assert [(s.run_id, s.attempt_id) for s in cluster.spans()] == [(run_id, attempt_id)]
    events = cluster.events(run_id)
    assert gapless(events)
    assert types(events).count("attempt.claimed") == 2
    assert types(events).count("attempt.start_requested") == 1
