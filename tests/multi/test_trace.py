"""Issue #7, "Must show" 3: one run, created over REST and run to its end by a reference
agent, is one trace across the processes: the console exporter of `truerun gateway`,
`truerun coordinator` and `truerun capacity` prints spans of all three under the trace id of
the REST request: the create, the claim, the dispatch and the runtime's events up to the
terminal one (the agent echoes the Start's trace context on its events)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_claim_race import REDIS_URL
from tests.support.auth import TEST_TOKEN
from tests.support.processes import TRUERUN, Managed
from tests.support.replicas import Deployment

pytestmark = [pytest.mark.multi, pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(300)]

HTTP_LISTENING = re.compile(r"^http listening on (\S+:\d+)$", re.MULTILINE)
API_TOKEN = TEST_TOKEN  # the gateway forwards it: the coordinators must accept it too


@pytest.fixture
def deployment(pg_url: str, tmp_path: Path) -> Iterator[Deployment]:
    owner = f"trace-{uuid.uuid4().hex[:8]}"
    deployment = Deployment(
        tmp_path, pg_url, REDIS_URL, owner, settings={"TRUERUN_OTEL_EXPORTER": "console"}
    )
    try:
        yield deployment
    finally:
        deployment.close()


def _spans(log: str) -> list[dict[str, Any]]:
    spans = []
    for line in log.splitlines():
        if line.startswith("{") and '"trace_id"' in line:
            try:
                spans.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by another writer: not a span of ours
                continue
    return spans


def _request(method: str, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {API_TOKEN}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def test_one_run_is_one_trace_from_rest_create_to_terminal(deployment: Deployment) -> None:
    deployment.migrate()
    deployment.start(coordinators=1, capacities=1, reconcilers=0)
    deployment.agent(0, 1)
    env = deployment.env()  # the same API tokens as every service
    argv = [TRUERUN, "gateway", "--http-addr", "127.0.0.1:0"]
    argv += ["--services-addr", f"127.0.0.1:{deployment.coordinator_ports[0]}"]
    gateway = Managed(argv, env, deployment.tmp / "logs" / "gateway.log")
    deployment.procs.started.append(gateway)
    http = gateway.wait_for_log(HTTP_LISTENING, 60).group(1)

    created = _request(
        "POST",
        f"http://{http}/v1/projects/trace/runs",
        {"owner_id": deployment.owner, "task_id": "traced", "spec": {"command": "echo traced"}},
    )
    run_id = created["id"]
    deadline = time.monotonic() + 120
    while True:
        run = _request("GET", f"http://{http}/v1/projects/trace/runs/{run_id}")
        if run.get("status") in ("RUN_STATUS_SUCCEEDED", "succeeded"):
            break
        assert time.monotonic() < deadline, run
        time.sleep(0.2)

    services = {
        "truerun-gateway": gateway,
        "truerun-coordinator": deployment.replica("coordinator", 0).proc,
        "truerun-capacity": deployment.replica("capacity", 0).proc,
    }
    root = next(
        s
        for s in _spans(gateway.log())
        if s["name"] == "POST /v1/projects/{project}/runs" and s["kind"] == "SpanKind.SERVER"
    )
    trace_id = root["context"]["trace_id"]
    wanted = {
        "truerun-gateway": {"POST /v1/projects/{project}/runs", "truerun.v1.RunService/CreateRun"},
        "truerun-coordinator": {
            "truerun.v1.RunService/CreateRun",
            "transition CreateRun",
            "dispatch start",  # the start fence is in the claim's write ("capacity claimed")
            "runtime event accepted",
            "runtime event running",
            "runtime event succeeded",
        },
        "truerun-capacity": {"capacity claimed"},
    }
    found: dict[str, set[str]] = {}
    deadline = time.monotonic() + 30  # the terminal event's span is written after its ack
    while True:
        found = {
            name: {
                s["name"]
                for s in _spans(proc.log())
                if s["context"]["trace_id"] == trace_id
                and s["resource"]["attributes"]["service.name"] == name
            }
            for name, proc in services.items()
        }
        if all(wanted[name] <= found[name] for name in wanted) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for name, names in wanted.items():
        assert names <= found[name], (name, sorted(names - found[name]), sorted(found[name]))
    print(f"\ntrace {trace_id} of run {run_id}:")
    for name, names in found.items():
        print(f"  {name}: {sorted(names)}")
