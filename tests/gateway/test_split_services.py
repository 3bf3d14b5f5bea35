"""`truerun gateway` as a real process in front of split services: RunService on one gRPC
server (what `truerun coordinator` serves) and CapacityService on another (`truerun
capacity`), reached through TRUERUN_SERVICES_ADDR and TRUERUN_CAPACITY_ADDR. Run and capacity
endpoints both answer. The process serves Prometheus metrics on TRUERUN_METRICS_ADDR: requests
counted and timed by method, route template and status, never by run id."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import httpx

from gateway.tokens import ApiTokens
from kernel.db.migrate import upgrade
from services.server import start_serving
from tests.support.capacity import open_capacity
from tests.support.gateway_stack import TOKENS, bearer
from tests.support.processes import Managed, Processes, _base_env

HTTP = re.compile(r"^http listening on (\S+:\d+)$", re.MULTILINE)
METRICS = re.compile(r"^metrics listening on (\S+:\d+)$", re.MULTILINE)
TRUERUN = str(Path(sys.executable).with_name("truerun"))
AUTH = bearer("token-all-projects")


async def test_gateway_process_reaches_run_and_capacity_services_apart_and_exports_metrics(
    sqlite_url: str, tmp_path: Path
) -> None:
    await upgrade(sqlite_url)
    procs = Processes(tmp_path)
    async with open_capacity(sqlite_url) as (app, caps):
        tokens = ApiTokens.parse(TOKENS)
        runs_only = await start_serving(app, "127.0.0.1:0", tokens=tokens)
        capacity_only = await start_serving(
            app, "127.0.0.1:0", caps, run_service=False, tokens=tokens
        )
        try:
            env = _base_env(
                procs.marker,
                {
                    "TRUERUN_HTTP_ADDR": "127.0.0.1:0",
                    "TRUERUN_METRICS_ADDR": "127.0.0.1:0",
                    "TRUERUN_SERVICES_ADDR": f"127.0.0.1:{runs_only.port}",
                    "TRUERUN_CAPACITY_ADDR": f"127.0.0.1:{capacity_only.port}",
                    "TRUERUN_API_TOKENS": TOKENS,
                },
            )
            gateway = Managed([TRUERUN, "gateway"], env, tmp_path / "gateway.log")
            procs.started.append(gateway)
            http_address = (await asyncio.to_thread(gateway.wait_for_log, HTTP)).group(1)
            metrics_address = (await asyncio.to_thread(gateway.wait_for_log, METRICS)).group(1)

            async with httpx.AsyncClient(base_url=f"http://{http_address}", timeout=30) as http:
                created = await http.post(
                    "/v1/projects/proj-p/runs",
                    json={"owner_id": "alice", "task_id": "split"},
                    headers=AUTH,
                )
                assert created.status_code == 201, created.text
                run_id = created.json()["id"]
                seen = await http.get(f"/v1/projects/proj-p/runs/{run_id}", headers=AUTH)
                assert seen.status_code == 200 and seen.json()["task_id"] == "split"
                paused = await http.post(
                    f"/v1/projects/proj-p/runs/{run_id}:pause",
                    json={"reason": "split test"},
                    headers=AUTH,
                )
                assert paused.status_code == 200, paused.text

                # CapacityService answers (over the RunService-only server these would be
                # UNIMPLEMENTED, a 502).
                occupancy = await http.get("/v1/capacity/owners/alice/instances/rt-1", headers=AUTH)
                assert occupancy.status_code == 200, occupancy.text
                assert "free_slots" in occupancy.json()
                agent = await http.get("/v1/agents/no-such-agent", headers=AUTH)
                assert agent.status_code == 404, agent.text
                assert agent.json()["reason"] == "AGENT_NOT_FOUND"

            async with httpx.AsyncClient(timeout=30) as scraper:
                scraped = await scraper.get(f"http://{metrics_address}/metrics")
            assert scraped.status_code == 200
            text = scraped.text
            for route, method, status in (
                ("/v1/projects/{project}/runs", "POST", "2xx"),
                ("/v1/projects/{project}/runs/{run}", "GET", "2xx"),
                ("/v1/projects/{project}/runs/{run}:pause", "POST", "2xx"),
                ("/v1/capacity/owners/{owner}/instances/{instance}", "GET", "2xx"),
                ("/v1/agents/{agent}", "GET", "4xx"),
            ):
                labels = f'method="{method}",route="{route}",status_class="{status}"'
                assert f"truerun_gateway_http_requests_total{{{labels}}} 1.0" in text, (route, text)
                assert (
                    f"truerun_gateway_http_request_duration_seconds_count{{{labels}}} 1.0" in text
                )
            assert run_id not in text and "alice" not in text and "no-such-agent" not in text
            assert await asyncio.to_thread(gateway.stop) == 0
        finally:
            procs.close()
            await runs_only.server.stop(None)
            await capacity_only.server.stop(None)
