"""Cancel in each phase of a run, with kills in between (issue #5, seed B §13.4).

Every phase is reached with real processes and observed through the public API before the
cancel: ``queued`` (no runtime), ``claimed`` (claimed through CapacityService.Claim for a
runtime that never starts it: a dispatcher that died after its claim), ``starting`` (the
agent's gRPC port blackholed by its proxy, so the Start is held), ``waiting_runtime`` (the
Start delayed by the proxy while a manual local task takes the agent's only slot),
``running`` and ``unknown`` (the agent SIGKILLed, the lease expired). Then the coordinator
or the agent is SIGKILLed and restarted. Whatever happened meanwhile, the run ends in exactly
one terminal state, ``cancelled`` (a committed cancel wins even over a runtime that finished
first), its process is stopped, its events are gapless, and nothing later resurrects it.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from truerun.v1 import capacity_service_pb2 as cs
from truerun.v1 import common_pb2
from truerun.v1 import run_service_pb2 as rs

from tests.faults.harness import OWNER, TERMINAL, Cluster, Service, display, gapless, types
from tests.faults.scenarios import applied_twice
from tests.support.processes import TRUERUN, pids_with_arg

LEASE_MS = 3000
RUN_TERMINAL_EVENTS = {f"run.{state}" for state in (*TERMINAL, "lost")}


def _fresh(cluster: Cluster, agent: Service) -> None:
    cluster.eventually(
        lambda: cluster.occupancy(agent).observation_fresh, 30, f"{agent.name}'s observation"
    )


def _restart_server(cluster: Cluster) -> None:
    assert cluster.server is not None
    cluster.kill(cluster.server)
    cluster.restart(cluster.server)


def _queued(cluster: Cluster, command: str, tmp_path: Path) -> tuple[str, bool]:
    run_id = cluster.submit("cancel-queued", command)
    cluster.wait_for(run_id, "queued", 10)
    answer = cluster.cancel(run_id)
    assert answer.outcome == rs.CANCEL_OUTCOME_CANCELLED
    _restart_server(cluster)
    cluster.start_agent("a", limit=1)
    return run_id, False


def _claimed(cluster: Cluster, command: str, tmp_path: Path) -> tuple[str, bool]:
    ghost = "ghost"
    cluster.api.service.ReportObservation(
        cs.ReportObservationRequest(
            observation=cs.Observation(
                owner_id=OWNER,
                runtime_instance_id=ghost,
                routes=[cs.Route(device_id=ghost, kind="stream")],
                limit=1,
                active=0,
            )
        ),
        timeout=10,
    )
    run_id = cluster.submit("cancel-claimed", command)
    claim = cluster.api.service.Claim(
        cs.ClaimRequest(
            owner_id=OWNER,
            runtime_instance_id=ghost,
            device_id=ghost,
            max_attempts=1,
            lease_ttl_ms=60_000,
            served_project_ids=["*"],
        ),
        timeout=10,
    )
    assert [c.run_id for c in claim.claimed] == [run_id], claim
    run = cluster.get(run_id)
    assert run.current_attempt.status == common_pb2.ATTEMPT_STATUS_CLAIMED
    assert display(run) == "starting" and not run.current_attempt.HasField("start_request_time")
    answer = cluster.cancel(run_id)
    assert answer.outcome == rs.CANCEL_OUTCOME_CANCELLED  # before the fence: nothing to stop
    _restart_server(cluster)
    cluster.start_agent("a", limit=1)
    return run_id, False


def _starting(cluster: Cluster, command: str, tmp_path: Path) -> tuple[str, bool]:
    agent = cluster.start_agent("a", limit=1, through_proxy=True)
    _fresh(cluster, agent)
    assert agent.proxy is not None
    agent.proxy.blackhole()  # the Start is sent and held: fenced, never answered
    run_id = cluster.submit("cancel-starting", command)
    run = cluster.wait_for(
        run_id,
        lambda r: r.current_attempt.status == common_pb2.ATTEMPT_STATUS_STARTING,
        30,
        "the start fence",
    )
    assert display(run) in ("starting", "unknown")
    answer = cluster.cancel(run_id)
    assert answer.outcome == rs.CANCEL_OUTCOME_REQUESTED
    assert display(answer.run) == "cancelling"
    _restart_server(cluster)
    agent.proxy.pass_through()  # the held Start and Cancel arrive on a dead stream
    return run_id, True


def _waiting_runtime(cluster: Cluster, command: str, tmp_path: Path) -> tuple[str, bool]:
    # Keepalive pings must outlive the delayed round trip (4 s), or the agent ends its own
    # stream (ping timeout = keepalive / 2) and the Start dies with it: unknown, not waiting.
    agent = cluster.start_agent("a", limit=1, through_proxy=True, keepalive_ms=30_000)
    _fresh(cluster, agent)
    assert agent.proxy is not None and agent.state_dir is not None
    gate = tmp_path / "manual-gate"
    agent.proxy.latency(2000)  # the heartbeat saying the slot is taken arrives late
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRUERUN_")}
    manual = ["sh", "-c", f"while [ ! -e '{gate}' ]; do sleep 0.05; done"]
    subprocess.run(
        [
            TRUERUN,
            "agent",
            "run-local",
            "--state-dir",
            str(agent.state_dir),
            "--detach",
            "--",
            *manual,
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=30,
    )
    run_id = cluster.submit("cancel-waiting", command)
    cluster.wait_for(run_id, "waiting_runtime", 30)
    agent.proxy.blackhole()  # the Cancel will not get through before the kill
    answer = cluster.cancel(run_id)
    assert answer.outcome == rs.CANCEL_OUTCOME_REQUESTED
    cluster.kill(agent)
    agent.proxy.pass_through()
    cluster.restart(agent)  # the task is back in its local queue behind the manual task
    return run_id, False


def _running(cluster: Cluster, command: str, tmp_path: Path) -> tuple[str, bool]:
    agent = cluster.start_agent("a", limit=1)
    run_id = cluster.submit("cancel-running", command)
    cluster.wait_for(run_id, "running", 30)
    cluster.eventually(lambda: any(s.run_id == run_id for s in cluster.spans()), 30, "started")
    answer = cluster.cancel(run_id)
    assert answer.outcome == rs.CANCEL_OUTCOME_REQUESTED
    cluster.kill(agent)
    _restart_server(cluster)
    cluster.restart(agent)
    return run_id, True


def _unknown(cluster: Cluster, command: str, tmp_path: Path) -> tuple[str, bool]:
    agent = cluster.start_agent("a", limit=1)
    run_id = cluster.submit("cancel-unknown", command)
    cluster.wait_for(run_id, "running", 30)
    cluster.eventually(lambda: any(s.run_id == run_id for s in cluster.spans()), 30, "started")
    cluster.kill(agent)
    cluster.wait_for(run_id, "unknown", 30)
    occupancy = cluster.occupancy(agent)
    assert cluster.get(run_id).current_attempt.runtime_task_id in occupancy.merged_task_ids
    # Held by the durable row itself, not only by the dead runtime's last observation.
    assert occupancy.durable_rows == 1, occupancy
    answer = cluster.cancel(run_id)
    assert answer.outcome == rs.CANCEL_OUTCOME_REQUESTED
    assert display(answer.run) == "cancelling"
    _restart_server(cluster)
    cluster.restart(agent)
    return run_id, True


PHASES: dict[str, Callable[[Cluster, str, Path], tuple[str, bool]]] = {
    "queued": _queued,
    "claimed": _claimed,
    "starting": _starting,
    "waiting_runtime": _waiting_runtime,
    "running": _running,
    "unknown": _unknown,
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_cancel_in_each_phase(
    phase: str, make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = make_cluster(lease_ttl_ms=LEASE_MS)
    marker = f"cancel-{phase}-{uuid.uuid4().hex}"
    command = cluster.side_effect(f"sleep 60; : {marker}")
    run_id, may_have_started = PHASES[phase](cluster, command, tmp_path)

    run = cluster.wait_for(run_id, (*TERMINAL, "lost"), 60)
    assert display(run) == "cancelled", (run.display_reason, cluster.displayed(run_id))
    assert run.status == common_pb2.RUN_STATUS_CANCELLED
    # A cancelled display means the runtime proved the stop (or nothing was ever started).
    assert not pids_with_arg(marker), "the cancelled command still runs"
    spans = [s for s in cluster.spans() if s.run_id == run_id]
    if not may_have_started:
        assert spans == [], spans
    assert all(s.end is not None for s in spans), spans
    assert len(spans) <= 1, spans

    # Nothing resurrects it: a later run goes through a live agent, this one stays put.
    (tmp_path / "manual-gate").touch()  # frees the slot a manual task held (waiting_runtime)
    probe = cluster.submit("probe", "true")
    assert display(cluster.wait_for(probe, TERMINAL, 60)) == "succeeded"
    assert display(cluster.get(run_id)) == "cancelled"
    events = cluster.events(run_id)
    assert gapless(events), [e.sequence for e in events]
    assert not applied_twice(events), types(events)
    finals = [t for t in types(events) if t in RUN_TERMINAL_EVENTS]
    assert finals == ["run.cancelled"], types(events)
    if phase in ("queued", "claimed"):  # before the fence: no Start was ever sent
        assert "attempt.start_requested" not in types(events), types(events)
    print(f"cancel in {phase}: seed={cluster.seed} spans={len(spans)} events={types(events)}")
