"""Issue #11 §1 end to end: the reference agent's "no" is honoured. ``truerun dev`` (SQLite
and PostgreSQL) and a real ``truerun agent --limit 1``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from truerun.v1 import run_service_pb2 as rs

from tests.e2e.conftest import OWNER, Live, display, payload
from tests.support.processes import TRUERUN

pytestmark = pytest.mark.e2e


def _create(live: Live, spec: dict[str, Any], task: str) -> str:
    body = struct_pb2.Struct()
    body.update(spec)
    request = rs.CreateRunRequest(project_id="e2e", owner_id=OWNER, task_id=task, spec=body)
    return str(live.runs.CreateRun(request, timeout=10).run.id)


def test_a_spec_the_agent_can_never_run_fails_with_its_reason_and_frees_the_slot(
    live: Live,
) -> None:
    """A spec with neither command nor argv (a typo: "cmd") passes CreateRun, since another
    kind of runtime may read other keys; the reference agent refuses it as an invalid spec.
    The run fails with the agent's reason (it never spins in starting), the agent's only
    slot is free, and the next run of the owner runs."""
    agent = live.start_agent(limit=1)
    refused = _create(live, {"cmd": "echo typo"}, "typo")
    run = live.wait_display(refused, "failed", "succeeded", "cancelled", "lost", timeout=30)
    assert display(run) == "failed", run
    assert run.error_code == "start_refused"
    assert f"refused by {live.instance_id}: " in run.error_summary
    assert '"command"' in run.error_summary
    assert run.attempt_count == 1
    rejected = [e for e in live.events(refused) if e.type == "attempt.start_rejected"]
    assert len(rejected) == 1 and payload(rejected[0])["permanent"] is True
    after = live.occupancy()
    assert after.durable_rows == 0, after
    next_run = live.submit("echo next", task="next")
    assert display(live.wait_display(next_run, "succeeded", "failed", timeout=30)) == "succeeded"
    assert agent.alive()


@pytest.mark.parametrize(
    "spec",
    [
        {"command": "true", "timeout_s": -1},
        {"command": ""},
        {"argv": []},
        {"command": "true", "argv": ["true"]},
        {"command": "true", "env": {"A": 1}},
        {"command": "true", "grace_ms": -5},
    ],
    ids=["negative-timeout", "empty-command", "empty-argv", "both", "env-number", "grace"],
)
def test_what_the_agent_would_refuse_is_refused_at_create_run(
    live: Live, spec: dict[str, Any]
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        _create(live, spec, "bad")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    listed = live.runs.ListRuns(rs.ListRunsRequest(project_id="e2e"), timeout=10)
    assert not [r for r in listed.runs if r.task_id == "bad"]  # nothing was created


def test_an_agent_with_a_wrong_token_exits_with_one_line(live: Live, tmp_path: Path) -> None:
    """Issue #11 §3: a refused runtime token is a configuration error, not an outage: the
    agent says so in one line and exits (status 2) instead of retrying for ever."""
    state = tmp_path / "agent-state"
    argv = [TRUERUN, "agent", "--server", live.address, "--token", "wrong", "--owner", OWNER]
    done = subprocess.run(
        [*argv, "--state-dir", str(state), "--keepalive-ms", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("truerun agent: truerun refused this runtime: UNAUTHENTICATED")
    assert "Traceback" not in done.stderr
    assert "wrong" not in last  # the token is never echoed back
