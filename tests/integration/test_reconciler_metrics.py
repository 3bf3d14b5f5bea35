"""A real `truerun reconciler` process serves Prometheus metrics with seed B §16 names: it
announces its address, and a lease it reconciles shows in truerun_run_reconcile_total (no run ids
in any label). It also answers gRPC health checks (the chart's probes): SERVING while it
runs; SIGTERM ends it with exit code 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.domain import commands as c
from coordinator.service.transitions import Transitions
from kernel.db.migrate import upgrade
from services.bootstrap import open_store
from tests.support.factories import SCHEDULER, spec

DEADLINE_S = 60.0  # the machine may be loaded; every wait polls something observable


def _wait_for(what: str, probe: Callable[[], str | None]) -> str:
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        found = probe()
        if found:
            return str(found)
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def test_truerun_reconciler_serves_metrics(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'truerun.db'}"
    await upgrade(url)
    store = await open_store(url)
    try:
        transitions = Transitions(store)
        run_id = (await transitions.create(spec())).run.id
        await transitions.execute(
            c.Claim(run_id, SCHEDULER, runtime_instance_id="i", lease_ttl_ms=1)
        )
    finally:
        await store.close()
    out = tmp_path / "reconciler.out"
    env = dict(
        os.environ,
        TRUERUN_DATABASE_URL=url,
        TRUERUN_METRICS_ADDR="127.0.0.1:0",
        TRUERUN_GRPC_ADDR="127.0.0.1:0",
    )
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "reconciler"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
    try:

        def announced() -> str | None:
            found = re.search(r"metrics listening on (\S+:\d+)", out.read_text())
            return found.group(1) if found else None

        address = _wait_for("metrics listening", announced)

        def scrape() -> str:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
                return str(response.read().decode())

        line = 'truerun_run_reconcile_total{executor="lease",result="requeued"} 1.0'

        def reconciled() -> str | None:
            text = scrape()
            return text if line in text else None

        text = _wait_for("the lease reconciled", reconciled)
        assert "truerun_run_non_terminal_age_seconds" in text
        assert run_id not in text

        grpc_address = re.search(r"grpc listening on (\S+:\d+)", out.read_text())
        assert grpc_address is not None, out.read_text()
        with grpc.insecure_channel(grpc_address.group(1)) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE_S) == 0, out.read_text()
