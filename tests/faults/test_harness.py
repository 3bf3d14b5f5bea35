"""The harness itself: a cluster on PostgreSQL + Redis through the proxies runs a command,
the side-effect log records one real start and end, and a restart reuses the same port and
data; the side-effect parser reads what the shell wrote."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.faults.harness import (
    TERMINAL,
    Cluster,
    display,
    gapless,
    overlaps,
    parse_side_effects,
    starts_per_attempt,
)


def test_cluster_runs_a_command_through_the_proxies(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(lease_ttl_ms=3000)
    assert cluster.pg_proxy is not None and cluster.redis_proxy is not None
    agent = cluster.start_agent("a1", limit=1, through_proxy=True)
    run_id = cluster.submit("smoke", cluster.side_effect("echo hi; exit 3"))
    run = cluster.wait_for(run_id, TERMINAL, 30)
    assert display(run) == "failed" and run.current_attempt.exit_code == 3
    spans = cluster.spans()
    assert [(s.run_id, s.exit_code) for s in spans] == [(run_id, 3)]
    assert starts_per_attempt(spans) == {run.current_attempt.id: 1}
    assert gapless(cluster.events(run_id))
    # every service reached its dependencies through the proxies
    assert cluster.pg_proxy.accepted > 0 and cluster.redis_proxy.accepted > 0
    assert agent.proxy is not None and agent.proxy.accepted > 0
    assert cluster.occupancy(agent).limit == 1

    server = cluster.server
    assert server is not None
    address = cluster.address
    cluster.kill(server)
    cluster.restart(server)
    assert cluster.address == address
    second = cluster.submit("smoke-2", cluster.side_effect("true"))
    assert display(cluster.wait_for(second, TERMINAL, 30)) == "succeeded"


def test_split_topology_survives_kills_of_each_service(
    make_cluster: Callable[..., Cluster],
) -> None:
    """``truerun capacity`` and ``truerun coordinator`` as processes of their own: each is
    SIGKILLed and restarted on its port, and runs go on."""
    cluster = make_cluster(topology="split", lease_ttl_ms=3000)
    assert cluster.capacity is not None and cluster.server is not None
    agent = cluster.start_agent("a1", limit=1)
    first = cluster.submit("split-1", cluster.side_effect("exit 0"))
    assert display(cluster.wait_for(first, TERMINAL, 30)) == "succeeded"
    for service in (cluster.capacity, cluster.server):
        cluster.kill(service)
        cluster.restart(service)
        run_id = cluster.submit(f"after-{service.name}", cluster.side_effect("exit 0"))
        assert display(cluster.wait_for(run_id, TERMINAL, 60)) == "succeeded", service.name
    assert cluster.occupancy(agent).limit == 1
    assert all(n == 1 for n in starts_per_attempt(cluster.spans()).values())


def test_side_effect_parser_and_overlaps(tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    log.write_text(
        "start r1 a1 10 100.0\n"
        "end r1 a1 10 105.0 0\n"
        "start r1 a2 11 104.0\n"  # overlaps a1 of the same run
        "start r2 b1 12 101.0\n"
        "start r3 c1"  # a torn last line
    )
    spans = parse_side_effects(log)
    assert [s.attempt_id for s in spans] == ["a1", "b1", "a2"]
    assert spans[0].end == 105.0 and spans[0].exit_code == 0 and spans[2].end is None
    assert len(overlaps(spans)) == 1
    assert starts_per_attempt(spans) == {"a1": 1, "a2": 1, "b1": 1}
