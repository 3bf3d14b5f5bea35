"""Issue #18: a worker that dies whole (a container death: the agent, every supervisor and
every command at once) must never stay `running`.

The kill (``worker.kill_worker``) freezes the whole worker first (SIGSTOP to the agent's
group and to every supervisor's and command's group, found through their durable handles and
proven against /proc), then SIGKILLs all of them, so nothing of it acts between the first
kill and the last; the same agent then restarts on its state dir (same instance id), as an
orchestrator restarts a pod with its volume. No hook in service code: only signals and the
public API.

Each layout runs on SQLite and PostgreSQL, embedded (`truerun dev`) and split (`truerun
capacity`, `truerun coordinator`, `truerun reconciler`). A monitor samples the API against
the side-effect log and the process table the whole time: no run is shown `running` for
longer than a lease and a heartbeat after its process died (tests/faults/scenarios.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from truerun.v1 import common_pb2

from tests.faults.harness import TERMINAL, Cluster, display, payload, starts_per_attempt
from tests.faults.scenarios import Monitor, status_written
from tests.faults.test_agent_kills import (
    TwoRuns,
    _retried_once_and_the_other_waits,
    _two_runs_running,
)
from tests.faults.worker import kill_worker

LEASE_MS = 3000
HEARTBEAT_MS = LEASE_MS // 3  # what the server asks for in Welcome
# The monitor's bound on "shown running after the process died": a lease and a heartbeat,
# plus its own polling and the reconciler's scan interval on a loaded machine.
RUNNING_MARGIN_S = HEARTBEAT_MS / 1000 + 2.0
LAYOUTS = [
    pytest.param("postgres", "dev", id="postgres-dev"),
    pytest.param("sqlite", "dev", id="sqlite-dev"),
    pytest.param("postgres", "split", id="postgres-split"),
    pytest.param("sqlite", "split", id="sqlite-split"),
]
LOST = "runtime_reports_lost"


def _cluster(make_cluster: Callable[..., Cluster], database: str, topology: str) -> Cluster:
    return make_cluster(database=database, topology=topology, lease_ttl_ms=LEASE_MS)


def _monitor(cluster: Cluster) -> Monitor:
    return Monitor(cluster, {"a": 2}, LEASE_MS, running_margin_s=RUNNING_MARGIN_S)


def _finish(monitor: Monitor, title: str) -> None:
    monitor.stop()
    print(
        f"{title}: polls={monitor.polls} longest shown running after the process died="
        f"{monitor.max_dead_running_s:.1f}s (bound {LEASE_MS / 1000 + RUNNING_MARGIN_S:.1f}s)"
    )
    assert not monitor.violations, monitor.violations


def _lost_with_reason(cluster: Cluster, runs: TwoRuns) -> None:
    """The non-idempotent run's first attempt is lost once, for the runtime's own report."""
    lost = cluster.wait_for(runs.waiting, "lost", 30)
    assert lost.current_attempt.id == runs.first[runs.waiting]
    assert lost.current_attempt.status == common_pb2.ATTEMPT_STATUS_LOST
    assert lost.current_attempt.termination_reason.startswith(LOST), lost.current_attempt
    events = [e for e in cluster.events(runs.waiting) if e.type == "attempt.lost"]
    assert len(events) == 1 and LOST in str(payload(events[0])), events


@pytest.mark.parametrize(("database", "topology"), LAYOUTS)
def test_s1_whole_worker_killed_mid_run_and_restarted(
    make_cluster: Callable[..., Cluster], database: str, topology: str
) -> None:
    """The restarted agent had both tasks and can account for neither: truerun asks on its
    Hello, the answers are LOST, both attempts are lost with that reason, the slots are free
    again, the idempotent run runs again exactly once (on the same agent), the other waits
    for a person."""
    cluster = _cluster(make_cluster, database, topology)
    agent = cluster.start_agent("a", limit=2)
    with _monitor(cluster) as monitor:
        runs = _two_runs_running(cluster)
        killed_at = kill_worker(cluster, agent)
        cluster.restart(agent)
        _lost_with_reason(cluster, runs)
        runs.gate.touch()
        _retried_once_and_the_other_waits(cluster, runs)
        shown = [monitor.seen_at(r, "running", a) for r, a in runs.first.items()]
        left_running_s = max((t - killed_at for times in shown for t in times), default=0.0)
        _finish(monitor, f"S1 whole worker [{database}-{topology}]")
    print(f"last 'running' answer {left_running_s:.1f}s after the kill")
    assert left_running_s <= (LEASE_MS + HEARTBEAT_MS) / 1000 + 1.0
    occupancy = cluster.occupancy(agent)
    assert occupancy.durable_rows == 0 and occupancy.free_slots == 2, occupancy


@pytest.mark.parametrize(("database", "topology"), [LAYOUTS[1], LAYOUTS[2]])
def test_s3_whole_worker_killed_after_the_exit_status_was_recorded(
    make_cluster: Callable[..., Cluster], database: str, topology: str
) -> None:
    """The commands ended and their supervisors recorded the exit status while the agent was
    frozen (nothing reported); then the whole worker dies. The restarted agent reports the
    recorded outcome: succeeded and failed as they ended, never lost, never run again."""
    cluster = _cluster(make_cluster, database, topology)
    agent = cluster.start_agent("a", limit=2)
    gate = cluster.gate("end")
    with _monitor(cluster) as monitor:
        ok = cluster.submit("ok", cluster.side_effect(cluster.wait_gate(gate)))
        bad = cluster.submit("bad", cluster.side_effect(f"{cluster.wait_gate(gate)}; exit 3"))
        for run_id in (ok, bad):
            cluster.wait_for(run_id, "running", 30)
        attempts = {r: cluster.get(r).current_attempt.id for r in (ok, bad)}
        cluster.freeze(agent)  # the agent only: its commands end and their status is written
        gate.touch()
        cluster.eventually(
            lambda: status_written(agent, attempts.values()), 30, "exit statuses on disk"
        )
        assert {display(cluster.get(r)) for r in (ok, bad)} <= {"running", "unknown"}
        kill_worker(cluster, agent)
        cluster.restart(agent)
        finished = {r: display(cluster.wait_for(r, TERMINAL, 30)) for r in (ok, bad)}
        assert finished == {ok: "succeeded", bad: "failed"}, finished
        assert cluster.get(bad).current_attempt.exit_code == 3
        _finish(monitor, f"S3 whole worker [{database}-{topology}]")
    for run_id in (ok, bad):
        assert cluster.get(run_id).attempt_count == 1
        assert "attempt.lost" not in [e.type for e in cluster.events(run_id)]
    assert starts_per_attempt(cluster.spans()) == dict.fromkeys(attempts.values(), 1)
