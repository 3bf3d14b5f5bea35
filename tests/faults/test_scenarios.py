"""The three scenarios of DESIGN.md "What goes wrong elsewhere", run against truerun.

Two reference agents (D = 2 each), a batch of short runs whose commands log their real start
and end outside truerun (the side-effect log); agent ``a`` is hit while it holds two runs:

- S1: SIGKILLed (its commands live on under their supervisors), restarted later;
- S2: frozen with SIGSTOP (the agent, its supervisors and its commands: the whole worker)
  past every lease, then resumed;
- S3: frozen until its commands wrote their side effect and the supervisors their exit
  status, then SIGKILLed before it could report a result, and restarted.

Each must show 0 lost, 0 duplicate starts, 0 runs executing twice at once, and a truthful
display at every poll of a background monitor (tests/faults/scenarios.py): the held runs
are shown ``unknown`` (never failed, never queued again, never run elsewhere) while nothing
proves their state, their slots stay held, and they end ``succeeded`` once the agent is
back with the evidence. Figures are printed.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.faults.harness import Cluster, Service, display
from tests.faults.scenarios import (
    FINAL,
    Monitor,
    ended,
    figures,
    live_on,
    started,
    status_written,
)
from tests.faults.worker import freeze_worker, thaw_worker

LEASE_MS = 3000
RUNS = 12
LIMIT = 2
BODY = "sleep 2"


def _two_agents(make_cluster: Callable[..., Cluster]) -> tuple[Cluster, Service, Service]:
    cluster = make_cluster(lease_ttl_ms=LEASE_MS)
    a = cluster.start_agent("a", limit=LIMIT)
    b = cluster.start_agent("b", limit=LIMIT)
    return cluster, a, b


def _batch(cluster: Cluster) -> list[str]:
    return [cluster.submit(f"s-{i}", cluster.side_effect(BODY)) for i in range(RUNS)]


def _holding_two(cluster: Cluster) -> list[str]:
    """Agent ``a`` shows two runs running whose commands started and have not ended."""

    def check() -> list[str] | None:
        held = live_on(cluster, "a")
        if len(held) == LIMIT and started(cluster, held):
            spans = [s for s in cluster.spans() if s.run_id in held]
            if all(s.end is None for s in spans):
                return held
        return None

    return cluster.eventually(check, 60, "agent a running two commands")


def _finish(cluster: Cluster, monitor: Monitor, run_ids: list[str], name: str) -> None:
    for run_id in run_ids:
        cluster.wait_for(run_id, FINAL, 90)
    monitor.stop()
    result, problems = figures(cluster, monitor, run_ids)
    print(f"seed={cluster.seed}")
    print(result.render(name))
    assert not problems, problems
    assert result.final == {"succeeded": RUNS}, result.final
    assert result.starts == RUNS and result.max_starts_per_attempt == 1
    assert result.overlapping_runs == 0


def test_s1_kill_agent_holding_two_runs(make_cluster: Callable[..., Cluster]) -> None:
    cluster, a, _ = _two_agents(make_cluster)
    with Monitor(cluster, {"a": LIMIT, "b": LIMIT}, LEASE_MS) as monitor:
        run_ids = _batch(cluster)
        held = _holding_two(cluster)
        cluster.kill(a)
        # The lease expires after the fence: unknown (not failed, not queued again).
        for run_id in held:
            cluster.wait_for(run_id, "unknown", 30)
        # The commands finish on their own while the agent is down; nobody can tell truerun.
        cluster.eventually(lambda: ended(cluster, held), 30, "the held commands' end lines")
        assert {display(cluster.get(r)) for r in held} == {"unknown"}
        cluster.restart(a)
        _finish(cluster, monitor, run_ids, "S1 kill an agent holding two runs")
    assert all(monitor.ever(r, "unknown") for r in held)


def test_s2_freeze_agent_past_every_lease_and_resume(make_cluster: Callable[..., Cluster]) -> None:
    cluster, a, _ = _two_agents(make_cluster)
    with Monitor(cluster, {"a": LIMIT, "b": LIMIT}, LEASE_MS) as monitor:
        run_ids = _batch(cluster)
        held = _holding_two(cluster)
        freeze_worker(cluster, a)
        for run_id in held:
            cluster.wait_for(run_id, "unknown", 30)
        # Past every lease: agent b drains the rest of the queue meanwhile, and never gets
        # the frozen runs (they are unknown, not lost, not queued again).
        others = [r for r in run_ids if r not in held]
        for run_id in others:
            cluster.wait_for(run_id, FINAL, 90)
        assert {display(cluster.get(r)) for r in held} == {"unknown"}
        assert not ended(cluster, held), "the frozen commands cannot have ended"
        thaw_worker(cluster, a)
        _finish(cluster, monitor, run_ids, "S2 freeze an agent past every lease, resume it")
    assert all(monitor.ever(r, "unknown") for r in held)


def test_s3_kill_agent_after_side_effect_before_result(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster, a, _ = _two_agents(make_cluster)
    with Monitor(cluster, {"a": LIMIT, "b": LIMIT}, LEASE_MS) as monitor:
        run_ids = _batch(cluster)
        held = _holding_two(cluster)
        cluster.freeze(a)  # the agent only: its commands run on and write their side effect
        attempts = [cluster.get(r).current_attempt.id for r in held]
        cluster.eventually(
            lambda: ended(cluster, held) and status_written(a, attempts),
            30,
            "side effects written and exit statuses on disk",
        )
        # The side effect happened, the result was never reported: not succeeded yet.
        assert {display(cluster.get(r)) for r in held} <= {"running", "unknown"}
        cluster.kill(a)
        for run_id in held:
            cluster.wait_for(run_id, "unknown", 30)
        cluster.restart(a)  # reports the recorded exit status; runs nothing again
        _finish(cluster, monitor, run_ids, "S3 kill an agent after the side effect")
