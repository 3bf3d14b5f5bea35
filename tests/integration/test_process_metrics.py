"""Issue #15 item 4: every process kind started for real (`truerun coordinator`, `capacity`,
`reconciler` and `gateway` over PostgreSQL and Redis, and `truerun dev`), a few runs driven
through to their end by reference agents, then each /metrics scraped over HTTP.

Checked: every family and label follows the Prometheus naming rules (the `truerun_` prefix,
`_total` only on counters, a unit on histograms), no label is named like an id and no label
value looks like one, each process exports exactly its own families (the gateway no door
families, `truerun dev` the union), the latency histograms count where the work happens, and
the queue gauges show a run waiting per project. The same processes' logs are one JSON object
per line (the separate services' default) with the gateway's access lines in them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families
from truerun.v1 import run_service_pb2, run_service_pb2_grpc

from gateway.metrics import GatewayMetrics
from kernel.tls import DEV_PLAINTEXT, PLAINTEXT
from services.metrics import CAPACITY_PARTS, COORDINATOR_PARTS, RECONCILER_PARTS, Metrics
from tests.integration.test_claim_race import REDIS_URL
from tests.support.auth import TEST_TOKEN
from tests.support.databases import create_pg_database, drop_pg_database
from tests.support.processes import TRUERUN, Managed
from tests.support.replicas import TOKEN as RUNTIME_TOKEN
from tests.support.replicas import Deployment

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.asyncio(loop_scope="module"),
]

METRICS = re.compile(r"^metrics listening on (\S+:\d+)$", re.MULTILINE)
HTTP = re.compile(r"^http listening on (\S+:\d+)$", re.MULTILINE)
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: Label names that would make a series per run, attempt, task, request or runtime.
ID_LABELS = {
    "id",
    "run",
    "run_id",
    "attempt",
    "attempt_id",
    "task",
    "task_id",
    "long_task_id",
    "instance",
    "instance_id",
    "runtime_instance_id",
    "request_id",
    "owner",
    "owner_id",
    "token",
    "path",
    "url",
}
ID_VALUE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-"  # a UUID
    r"|\b[0-9A-HJKMNP-TV-Z]{26}\b"  # a ULID
    r"|[0-9a-fA-F]{16,}"  # long hex (tokens, hashes, request ids)
)
UNIT_SUFFIXES = ("_seconds", "_bytes")
#: What the processes print (not log): the readiness lines tests and operators read.
PRINTED = re.compile(
    r"^(?:(?:metrics|grpc|http) listening on \S+|reconciler running|"
    r"(?:coordinator|capacity) stopped|dashboard \S+|"
    + re.escape(PLAINTEXT)
    + "|"
    + re.escape(DEV_PLAINTEXT)
    + r")$"
)
#: gRPC's C core writes its own lines to stderr (absl format), outside Python's logging.
NATIVE = re.compile(r"^(?:[EWIF]\d{4} \d\d:\d\d:\d\d|WARNING: All log messages before absl)")
QUERY_SECRET = "query-secret-4f1e"


@dataclass
class Stack:
    deployment: Deployment
    gateway: Managed
    dev: Managed
    dev_http: str
    dev_token: str
    gateway_http: str
    scrape_at: dict[str, str] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)

    def procs(self) -> dict[str, Managed]:
        return {
            "coordinator": self.deployment.replica("coordinator", 0).proc,
            "capacity": self.deployment.replica("capacity", 0).proc,
            "reconciler": self.deployment.replica("reconciler", 0).proc,
            "gateway": self.gateway,
            "dev": self.dev,
        }


async def _run_to_end(http: httpx.AsyncClient, base: str, token: str, body: dict[str, Any]) -> str:
    auth = {"Authorization": f"Bearer {token}"}
    created = await http.post(f"{base}/runs", json=body, headers=auth)
    assert created.status_code == 201, created.text
    run_id: str = created.json()["id"]
    deadline = time.monotonic() + 60
    while True:
        run = (await http.get(f"{base}/runs/{run_id}", headers=auth)).json()
        if run.get("status") in ("RUN_STATUS_SUCCEEDED", "succeeded"):
            return run_id
        assert time.monotonic() < deadline, run
        await _pause()


async def _pause() -> None:
    await asyncio.sleep(0.1)  # between polls of a condition, never instead of one


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    url = await create_pg_database()
    tmp = Path(tmp_path_factory.mktemp("process-metrics"))
    owner = f"metrics-{uuid.uuid4().hex[:8]}"
    fast = {"TRUERUN_METRICS_SCAN_INTERVAL_MS": "300"}
    # owner nobody-here has a runtime token but no runtime online: its run waits in the queue
    bound = {**fast, "TRUERUN_RUNTIME_TOKENS": f"{owner}:{RUNTIME_TOKEN};nobody-here:rt-offline"}
    deployment = Deployment(tmp, url, REDIS_URL, owner, settings=bound)
    try:
        deployment.migrate()
        deployment.start(coordinators=1, capacities=1, reconcilers=1)
        argv = [TRUERUN, "gateway", "--http-addr", "127.0.0.1:0"]
        argv += ["--services-addr", f"127.0.0.1:{deployment.coordinator_ports[0]}"]
        argv += ["--capacity-addr", f"127.0.0.1:{deployment.capacity_ports[0]}"]
        gateway = Managed(argv, deployment.env(), tmp / "logs" / "gateway.log")
        deployment.procs.started.append(gateway)
        dev = deployment.procs.dev(tmp / "dev", env=fast)
        deployment.agent(0, 2)
        deployment.procs.agent(dev.address, dev.token(), "dev-owner", tmp / "dev-agent", 2)
        live = Stack(
            deployment,
            gateway,
            dev,
            dev_http=dev.wait_for_log(HTTP, 30).group(1),
            dev_token=dev.api_token(),
            gateway_http=gateway.wait_for_log(HTTP, 60).group(1),
        )
        for kind, proc in live.procs().items():
            live.scrape_at[kind] = proc.wait_for_log(METRICS, 30).group(1)
        async with httpx.AsyncClient(timeout=30) as http:
            split = f"http://{live.gateway_http}/v1/projects/metrics-a"
            embedded = f"http://{live.dev_http}/v1/projects/metrics-dev"
            for n in range(2):
                body = {"owner_id": owner, "task_id": f"m{n}", "spec": {"command": "echo m"}}
                live.run_ids.append(await _run_to_end(http, split, TEST_TOKEN, body))
            body = {"owner_id": "dev-owner", "task_id": "d", "spec": {"command": "echo d"}}
            live.run_ids.append(await _run_to_end(http, embedded, live.dev_token, body))
            # one run nobody can take: it waits in project metrics-q's queue
            for base, token in ((split, TEST_TOKEN), (embedded, live.dev_token)):
                waiting = await http.post(
                    base.replace("metrics-a", "metrics-q").replace("metrics-dev", "metrics-q")
                    + "/runs",
                    json={"owner_id": "nobody-here", "task_id": "q", "spec": {"command": "x"}},
                    headers={"Authorization": f"Bearer {token}"},
                )
                assert waiting.status_code == 201, waiting.text
                live.run_ids.append(waiting.json()["id"])
            # refused and unknown requests, one with a would-be credential in its query
            refused = await http.get(f"{split}/runs?token={QUERY_SECRET}")
            assert refused.status_code == 401
        # a gRPC call without a token: refused, and counted as such
        address = f"127.0.0.1:{deployment.coordinator_ports[0]}"
        async with grpc.aio.insecure_channel(address) as channel:
            stub = run_service_pb2_grpc.RunServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as unauthenticated:
                await stub.GetRun(run_service_pb2.GetRunRequest(id="none"), timeout=10)
            assert unauthenticated.value.code() is grpc.StatusCode.UNAUTHENTICATED
        yield live
    finally:
        deployment.close()
        await drop_pg_database(url)


async def _families(address: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.get(f"http://{address}/metrics")
    assert answer.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(answer.text)}


async def _sample(address: str, name: str, labels: dict[str, str]) -> float | None:
    for family in (await _families(address)).values():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def _own(parts: frozenset[str] | None, gateway: bool = False) -> set[str]:
    """The families a process with ``parts`` registers (what the code says it exports)."""
    metrics = Metrics() if parts is None else Metrics(parts=parts)
    metrics.count_refusals({})  # what a process with runtime streams adds (others: nothing)
    if gateway:
        GatewayMetrics(metrics.registry)
    return {family.name for family in metrics.registry.collect()}


async def test_every_family_and_label_follows_the_naming_rules(stack: Stack) -> None:
    for kind, address in stack.scrape_at.items():
        families = await _families(address)
        assert families, kind
        for name, family in families.items():
            assert NAME.fullmatch(name) and name.startswith("truerun_"), (kind, name)
            if family.type == "counter":
                assert all(s.name.endswith("_total") for s in family.samples), (kind, name)
            else:
                assert not name.endswith("_total"), (kind, name, family.type)
            if family.type == "histogram":
                assert name.endswith(UNIT_SUFFIXES), (kind, name)
            for sample in family.samples:
                for label, value in sample.labels.items():
                    assert LABEL_NAME.fullmatch(label) and not label.startswith("__"), label
                    assert label not in ID_LABELS, (kind, name, label)
                    assert not ID_VALUE.search(value), (kind, name, label, value)
    for kind, address in stack.scrape_at.items():
        async with httpx.AsyncClient(timeout=10) as http:
            text = (await http.get(f"http://{address}/metrics")).text
        for leaked in (*stack.run_ids, stack.deployment.owner, TEST_TOKEN, QUERY_SECRET):
            assert leaked not in text, (kind, leaked)


async def test_each_process_exports_only_its_own_families(stack: Stack) -> None:
    exported = {kind: set(await _families(a)) for kind, a in stack.scrape_at.items()}
    assert exported["coordinator"] == _own(COORDINATOR_PARTS)
    assert exported["capacity"] == _own(CAPACITY_PARTS)
    assert exported["reconciler"] == _own(RECONCILER_PARTS)
    assert exported["gateway"] == {
        "truerun_gateway_http_requests",
        "truerun_gateway_http_request_duration_seconds",
    }
    assert exported["dev"] == _own(None, gateway=True)  # the union
    assert exported["dev"] >= set().union(*(v for k, v in exported.items() if k != "dev"))
    # what the parts mean, spelled out
    assert not {n for n in exported["gateway"] if n.startswith("truerun_run_transition")}
    assert "truerun_claim_seconds" in exported["capacity"]
    assert "truerun_claim_seconds" not in exported["coordinator"]
    assert "truerun_run_reconcile" in exported["reconciler"]
    assert "truerun_run_reconcile" not in exported["coordinator"] | exported["capacity"]
    assert "truerun_long_task_outcome" not in exported["capacity"]
    assert "truerun_runtime_event_ingest_seconds" in exported["coordinator"]
    assert "truerun_runtime_event_ingest_seconds" not in exported["reconciler"]


async def test_latency_histograms_count_where_the_work_happens(stack: Stack) -> None:
    at = stack.scrape_at
    create = {"service": "truerun.v1.RunService", "method": "CreateRun", "code": "OK"}
    # three runs created through the split gateway: two ran, one waits
    assert (await _sample(at["coordinator"], "truerun_grpc_server_handled_total", create)) == 3
    no_token = {"service": "truerun.v1.RunService", "method": "GetRun", "code": "UNAUTHENTICATED"}
    assert (await _sample(at["coordinator"], "truerun_grpc_server_handled_total", no_token)) == 1
    claim = {"service": "truerun.v1.CapacityService", "method": "Claim", "code": "OK"}
    assert (await _sample(at["capacity"], "truerun_grpc_server_handled_total", claim) or 0) >= 2
    claimed = await _sample(at["capacity"], "truerun_claim_seconds_count", {"result": "claimed"})
    assert (claimed or 0) >= 2
    door = {"command": "CreateRun"}
    assert (await _sample(at["coordinator"], "truerun_run_transition_seconds_count", door)) == 3
    assert (
        await _sample(at["coordinator"], "truerun_runtime_event_ingest_seconds_count", {}) or 0
    ) >= 2
    refused = {"method": "GET", "route": "/v1/projects/{project}/runs", "status_class": "4xx"}
    assert (await _sample(at["gateway"], "truerun_gateway_http_requests_total", refused)) == 1
    # `truerun dev`: the same families, its own gateway's requests among them
    assert (await _sample(at["dev"], "truerun_run_transition_seconds_count", door)) == 2
    created = {"method": "POST", "route": "/v1/projects/{project}/runs", "status_class": "2xx"}
    assert (await _sample(at["dev"], "truerun_gateway_http_requests_total", created)) == 2


async def test_queue_gauges_show_the_waiting_run_per_project(stack: Stack) -> None:
    queued = {"project": "metrics-q"}
    deadline = time.monotonic() + 10  # the scan runs every 300 ms here
    for kind in ("coordinator", "reconciler", "dev"):
        while (
            depth := await _sample(stack.scrape_at[kind], "truerun_run_queue_depth", queued)
        ) != 1:
            assert time.monotonic() < deadline, (kind, depth)
            await _pause()
        age = await _sample(stack.scrape_at[kind], "truerun_run_queue_oldest_age_seconds", queued)
        assert age is not None and age >= 0, kind
        # a project whose runs all ran has no queue: depth 0 once seen, or never a series
        done = await _sample(
            stack.scrape_at[kind], "truerun_run_queue_depth", {"project": "metrics-a"}
        )
        assert done in (None, 0.0), (kind, done)


def _records(proc: Managed) -> list[dict[str, Any]]:
    records = []
    for line in proc.log().splitlines():
        if not line or PRINTED.fullmatch(line) or NATIVE.match(line):
            continue
        record = json.loads(line)  # anything else is one JSON object on its own line
        assert {"ts", "level", "logger", "msg"} <= set(record), record
        records.append(record)
    return records


async def test_the_services_log_one_json_object_per_line_with_access_lines(stack: Stack) -> None:
    procs = stack.procs()
    for kind in ("coordinator", "capacity", "reconciler", "gateway"):
        _records(procs[kind])
    access = [r for r in _records(procs["gateway"]) if r["logger"] == "truerun.access"]
    routes = {(r["method"], r["route"], r["status"]) for r in access}
    assert ("POST", "/v1/projects/{project}/runs", 201) in routes
    assert ("GET", "/v1/projects/{project}/runs/{run}", 200) in routes
    assert ("GET", "/v1/projects/{project}/runs", 401) in routes
    for record in access:
        assert record["duration_ms"] >= 0 and record["bytes"] >= 0, record
        assert re.fullmatch(r"[0-9a-f]{16}", record["request_id"]), record
    gateway_log = procs["gateway"].log()
    assert TEST_TOKEN not in gateway_log and QUERY_SECRET not in gateway_log
    assert not any(run_id in gateway_log for run_id in stack.run_ids)  # templates, not paths
    # `truerun dev` on a terminal keeps text: its readiness lines and no access lines
    assert not any(line.startswith("{") for line in procs["dev"].log().splitlines())
