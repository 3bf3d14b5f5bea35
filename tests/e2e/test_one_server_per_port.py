"""One truerun process per port. gRPC binds with SO_REUSEPORT unless told otherwise, so a
second server started on a port in use came up too and took part of its connections (a CI
run saw a coordinator start on the capacity service's port and answer ConfigureAgent with
UNIMPLEMENTED). Now the second refuses to start, with one line, and the first goes on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.processes import TRUERUN, Processes, _base_env

pytestmark = pytest.mark.e2e


def test_a_second_server_on_a_port_in_use_refuses_to_start(tmp_path: Path) -> None:
    procs = Processes(tmp_path)
    try:
        first = procs.dev(tmp_path / "first")
        argv = [TRUERUN, "dev", "--data-dir", str(tmp_path / "second")]
        second = subprocess.run(
            [*argv, "--grpc-addr", first.address],
            env=_base_env(procs.marker, {"TRUERUN_GRACE_SECONDS": "1"}),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode != 0, second.stdout
        assert f"cannot listen on {first.address}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        assert "grpc listening" not in second.stdout
        with grpc.insecure_channel(first.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        assert first.alive()
    finally:
        procs.close()
    assert not procs.leftovers()
