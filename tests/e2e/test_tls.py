"""Issue #11 §3 end to end: a real ``truerun dev`` serving TLS with mTLS for gRPC, the CLI
and a real ``truerun agent`` reaching it with certificates from files; and the settings that
cannot work stopping a process with one line."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import run_service_pb2_grpc

from coordinator.api.bearer import with_bearer
from kernel.tls import DEV_PLAINTEXT, sync_channel
from tests.e2e.conftest import OWNER, display, eventually
from tests.support.processes import TRUERUN, Processes
from tests.support.tls import make_pki

pytestmark = pytest.mark.e2e


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(logs)
    try:
        yield processes
    finally:
        processes.close()
    assert not processes.leftovers()


def _truerun(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """A `truerun` command with only ``env``'s TRUERUN_* settings; bounded."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRUERUN_")}
    return subprocess.run(
        [TRUERUN, *args], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


def test_dev_serves_tls_with_mtls_to_the_cli_and_the_agent(
    tmp_path: Path, procs: Processes
) -> None:
    pki = make_pki(tmp_path / "pki")
    # the dev gateway is a gRPC client of its own mTLS port: it needs the client files too
    server = procs.dev(tmp_path / "data", {**pki.server_env(mtls=True), **pki.client_env()})
    dashboard = server.wait_for_log(re.compile(r"^dashboard (\S+)$", re.MULTILINE)).group(1)
    assert dashboard.startswith("https://127.0.0.1:")
    log = server.log()
    assert f"grpc listening on {server.address} (mtls)" in log
    assert re.search(r"^metrics listening on 127\.0\.0\.1:\d+ \(tls\)$", log, re.MULTILINE)
    assert re.search(r"^http listening on 127\.0\.0\.1:\d+ \(tls\)$", log, re.MULTILINE)
    assert DEV_PLAINTEXT not in log
    cli_env = {**pki.client_env(), "TRUERUN_API_TOKEN": server.api_token()}
    submitted = _truerun(
        *("submit", "tls-job", "--project", "e2e", "--owner", OWNER),
        *("--command", "echo over-tls", "--server", server.address),
        env=cli_env,
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.split()[0]
    # without a client certificate the same command gets no connection
    refused = _truerun(
        "ls",
        "--server",
        server.address,
        env={**pki.client_env(with_cert=False), "TRUERUN_API_TOKEN": server.api_token()},
    )
    assert refused.returncode == 2  # no connection: one line, exit 2 (services/cli/errors.py)
    assert "UNAVAILABLE" in refused.stderr
    procs.agent(
        server.address,
        server.token(),
        OWNER,
        tmp_path / "agent",
        extra_args=(
            *("--tls-ca-file", str(pki.ca)),
            *("--tls-client-cert-file", str(pki.client_cert)),
            *("--tls-client-key-file", str(pki.client_key)),
        ),
    )
    raw = sync_channel(server.address, pki.client_files())
    try:
        runs = run_service_pb2_grpc.RunServiceStub(with_bearer(raw, server.api_token()))

        def finished() -> bool:
            run = runs.GetRun(rs.GetRunRequest(id=run_id), timeout=10)
            return display(run) in ("succeeded", "failed")

        eventually(finished, 30, "the run to finish through the mTLS agent")
    finally:
        raw.close()
    listed = _truerun("ls", "--server", server.address, env=cli_env)
    assert listed.returncode == 0, listed.stderr
    assert f"{run_id}  tls-job" in listed.stdout and "succeeded" in listed.stdout


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "cert without key",
            "TRUERUN_TLS_CERT_FILE is set but TRUERUN_TLS_KEY_FILE is not: set both or neither",
        ),
        ("missing file", "TRUERUN_TLS_KEY_FILE={missing}: cannot read it: No such file"),
        ("key of another cert", "are not a PEM certificate and its private key"),
        ("plaintext off loopback", "truerun dev is plaintext (no TLS) and binds loopback only"),
    ],
)
def test_tls_settings_that_cannot_work_stop_dev_with_one_line(
    tmp_path: Path, case: str, message: str
) -> None:
    pki = make_pki(tmp_path / "pki")
    missing = tmp_path / "nowhere.pem"
    env = {
        "cert without key": {"TRUERUN_TLS_CERT_FILE": str(pki.server_cert)},
        "missing file": {**pki.server_env(), "TRUERUN_TLS_KEY_FILE": str(missing)},
        "key of another cert": {**pki.server_env(), "TRUERUN_TLS_KEY_FILE": str(pki.client_key)},
        "plaintext off loopback": {"TRUERUN_GRPC_ADDR": "0.0.0.0:0"},
    }[case]
    data_dir = tmp_path / "data"
    result = _truerun("dev", "--data-dir", str(data_dir), env=env)
    assert result.returncode == 1  # what every config error exits with (kernel/config.py)
    assert message.format(missing=missing) in _one_line(result)
    assert not data_dir.exists()  # refused before anything was created


def test_an_agent_with_an_unreadable_tls_file_stops_with_exit_status_2(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    result = _truerun(
        "agent",
        *("--owner", OWNER, "--state-dir", str(tmp_path / "agent")),
        *("--tls-ca-file", str(missing)),
        env={"TRUERUN_TOKEN": "rt-unused"},
    )
    assert result.returncode == 2  # the agent's usage errors (argparse)
    assert f"TRUERUN_TLS_CA_FILE={missing}: cannot read it" in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr
