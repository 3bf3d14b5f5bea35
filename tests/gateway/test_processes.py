"""The gateway as real processes: `truerun dev` serves it (TRUERUN_HTTP_ADDR, port 0) with an
all-projects token it writes to DATA_DIR/api.token (mode 0600) and prints in the dashboard
link; `truerun gateway` serves it alone in front of the services' gRPC address, with the
services' tokens from TRUERUN_API_TOKENS_FILE. Both stop on SIGTERM."""

from __future__ import annotations

import re
import stat
import sys
from pathlib import Path

import httpx

from tests.support.processes import Managed, Processes, _base_env

HTTP = re.compile(r"^http listening on (\S+:\d+)$", re.MULTILINE)
DASHBOARD = re.compile(r"^dashboard (http://\S+)$", re.MULTILINE)
TRUERUN = str(Path(sys.executable).with_name("truerun"))


def test_truerun_dev_and_truerun_gateway_serve_the_gateway(tmp_path: Path) -> None:
    procs = Processes(tmp_path)
    try:
        dev = procs.dev(tmp_path / "data", {"TRUERUN_HTTP_ADDR": "127.0.0.1:0"})
        http_address = dev.wait_for_log(HTTP).group(1)
        token_file = tmp_path / "data" / "api.token"
        token = token_file.read_text().strip()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        data = tmp_path / "data"  # tokens and the database: the user's alone
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        for private in (data / "truerun.db", data / "runtime.token"):
            assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
        assert dev.wait_for_log(DASHBOARD).group(1) == f"http://{http_address}/#token={token}"

        with httpx.Client(base_url=f"http://{http_address}", timeout=30) as http:
            assert http.get("/healthz").json() == {"status": "ok"}
            dashboard = http.get("/")  # the static dashboard needs no token; the API does
            assert dashboard.status_code == 200
            assert dashboard.headers["content-type"].startswith("text/html")
            assert http.get("/v1/projects/default/runs").status_code == 401
            created = http.post(
                "/v1/projects/default/runs",
                json={"owner_id": "me", "task_id": "hello"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]

        # The services and the gateway in front of them share the tokens (the gateway
        # forwards each caller's token): the services restart with the file's tokens.
        secrets = tmp_path / "api-tokens"
        secrets.write_text("# one entry per line\nreader-token:default\nother-token:elsewhere\n")
        assert dev.stop() == 0
        dev = procs.dev(tmp_path / "data", {"TRUERUN_API_TOKENS_FILE": str(secrets)})
        env = _base_env(
            procs.marker,
            {
                "TRUERUN_HTTP_ADDR": "127.0.0.1:0",
                "TRUERUN_SERVICES_ADDR": dev.address,
                "TRUERUN_API_TOKENS_FILE": str(secrets),
            },
        )
        alone = Managed([TRUERUN, "gateway"], env, tmp_path / "gateway.log")
        procs.started.append(alone)
        alone_address = alone.wait_for_log(HTTP).group(1)
        with httpx.Client(base_url=f"http://{alone_address}", timeout=30) as http:
            path = f"/v1/projects/default/runs/{run_id}"
            seen = http.get(path, headers={"Authorization": "Bearer reader-token"})
            assert seen.status_code == 200 and seen.json()["task_id"] == "hello"
            hidden = http.get(path, headers={"Authorization": "Bearer other-token"})
            assert hidden.status_code == 404
            assert http.get(path, headers={"Authorization": f"Bearer {token}"}).status_code == 401
        assert alone.stop() == 0
        assert dev.stop() == 0
    finally:
        procs.close()
