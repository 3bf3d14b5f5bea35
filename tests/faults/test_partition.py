"""A network partition between an agent and the control plane, with self-fencing on: the
agent stops its command once truerun has been unreachable for self_fence_after; truerun
declares the attempt lost only after lost_after (> self_fence_after + a margin) and retries
the idempotent run elsewhere. The side-effect log proves the two never ran at once. This is
the only way automatic replacement can promise no overlap (docs/operations.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.faults.harness import (
    TERMINAL,
    Cluster,
    display,
    gapless,
    overlaps,
    starts_per_attempt,
    types,
)

LEASE_MS = 2000
SELF_FENCE_MS = 2000
KEEPALIVE_MS = 500  # a dead stream is noticed after about keepalive + its 1 s timeout
LOST_AFTER_MS = 6000  # > self-fence + keepalive detection + the SIGTERM grace, with margin


def test_partition_with_self_fencing_never_overlaps(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(lease_ttl_ms=LEASE_MS, lost_after_ms=LOST_AFTER_MS)
    original = cluster.start_agent(
        "a1",
        limit=1,
        through_proxy=True,
        self_fence_after_ms=SELF_FENCE_MS,
        keepalive_ms=KEEPALIVE_MS,
    )
    assert original.proxy is not None
    gate = cluster.gate("finish")
    run_id = cluster.submit("fenced", cluster.side_effect(cluster.wait_gate(gate)), idempotent=True)
    cluster.wait_for(run_id, "running", 30)
    first = cluster.get(run_id).current_attempt.id
    cluster.eventually(cluster.spans, 10, "the command's start line")

    original.proxy.blackhole()
    cut_at = time.time()
    # The replacement is ready from now on; it may only get the run once truerun gave up.
    cluster.start_agent("a2", limit=1)

    # Self-fencing: the partitioned agent stops its own command (SIGTERM: the end line).
    stopped = cluster.eventually(
        lambda: [s for s in cluster.spans() if s.attempt_id == first and s.end is not None],
        30,
        "the original command stopped by self-fencing",
    )[0]
    fenced_after = stopped.end - cut_at if stopped.end is not None else 0.0
    detection = 2 * KEEPALIVE_MS / 1000 + 1.0
    assert fenced_after <= (SELF_FENCE_MS / 1000) + detection + 2.0, fenced_after
    assert stopped.exit_code == 143

    # Truerun: unknown (never failed), then lost by policy, then a new attempt on a2.
    cluster.wait_for(run_id, lambda r: r.attempt_count == 2, 60, "the retry")
    gate.touch()
    run = cluster.wait_for(run_id, TERMINAL, 30)
    assert display(run) == "succeeded"
    assert run.current_attempt.runtime_instance_id == "a2"
    shown = cluster.displayed(run_id)
    assert "unknown" in shown or "lost" in shown, shown

    spans = cluster.spans()
    replacement = [s for s in spans if s.attempt_id != first]
    assert len(replacement) == 1, spans
    assert not overlaps(spans), spans
    assert starts_per_attempt(spans) == {first: 1, replacement[0].attempt_id: 1}
    # The replacement started only after lost_after (counted from the lease's end, which is
    # at most one heartbeat interval before the cut).
    heartbeat_s = LEASE_MS / 3 / 1000
    assert replacement[0].start - cut_at >= (LEASE_MS + LOST_AFTER_MS) / 1000 - heartbeat_s
    events = cluster.events(run_id)
    assert gapless(events)
    assert types(events).count("attempt.lost") == 1

    # The partition heals: the original reports its self-fenced end late; it changes nothing.
    original.proxy.pass_through()
    cluster.eventually(
        lambda: "attempt.late_callback_ignored" in types(cluster.events(run_id)),
        30,
        "the late report of the self-fenced attempt",
    )
    assert display(cluster.get(run_id)) == "succeeded"
