"""What the browser tests do with a live dashboard: create runs over REST, open pages (each
tab signs in through the address fragment), find a run's state cell, drive the runtime side
with a scripted runtime, and save screenshots."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import httpx
from playwright.async_api import BrowserContext, Locator, Page, expect
from truerun.v1 import capacity_service_pb2, capacity_service_pb2_grpc, runtime_service_pb2_grpc

from tests.support.auth import aio_channel
from tests.support.processes import DevServer, Processes
from tests.support.scripted_runtime import ScriptedRuntime

PROJECT = "ui"
TOKEN = "ui-test-token"
OPERATOR_TOKEN = "ui-operator-token"  # sees PROJECT and may use the operator commands
ADMIN_TOKEN = "ui-admin-token"  # an operator of every project: agent settings (docs/tenancy.md)
OWNER = "ui-owner"
# Generous: two cores shared with other test runs, a browser and the whole stack.
WAIT_MS = 20_000

# The cell that shows a run's state on each page: a row keyed by run id in a table, or the
# run's own state box on the detail page.
LIST_PAGES = ("queue", "mywork", "automations")


@dataclass
class Dashboard:
    base: str
    server: DevServer
    channel: grpc.aio.Channel
    shots: Path
    #: What started the server (a test that restarts it starts the next one with it).
    procs: Processes | None = None

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )

    async def create_run(self, **fields: Any) -> dict[str, Any]:
        body = {"owner_id": OWNER, "task_id": "nightly-report", **fields}
        async with self.http() as client:
            response = await client.post(f"/v1/projects/{PROJECT}/runs", content=json.dumps(body))
        assert response.status_code == 201, response.text
        run: dict[str, Any] = response.json()
        return run

    async def get_run(self, run_id: str) -> dict[str, Any]:
        async with self.http() as client:
            response = await client.get(f"/v1/projects/{PROJECT}/runs/{run_id}")
        assert response.status_code == 200, response.text
        run: dict[str, Any] = response.json()
        return run

    async def configure_agent(self, agent_id: str, concurrency: int = 1) -> None:
        agent = capacity_service_pb2.Agent(
            agent_id=agent_id,
            concurrency=concurrency,
            workspace_kind=capacity_service_pb2.WORKSPACE_KIND_NONE,
        )
        async with aio_channel(self.server.address, ADMIN_TOKEN) as admin:
            stub = capacity_service_pb2_grpc.CapacityServiceStub(admin)
            await stub.ConfigureAgent(capacity_service_pb2.ConfigureAgentRequest(agent=agent))

    def runtime(
        self, instance: str = "ui-instance", agent_version: str = "", lineage: str = ""
    ) -> ScriptedRuntime:
        stub = runtime_service_pb2_grpc.RuntimeServiceStub(self.channel)
        return ScriptedRuntime(
            stub,
            owner=OWNER,
            instance=instance,
            device="ui-device",
            token=self.server.token(),
            agent_version=agent_version,
            lineage=lineage,
        )

    async def open(self, context: BrowserContext, route: str, token: str = TOKEN) -> Page:
        """A new tab on ``route`` (e.g. ``/queue``), signed in through the fragment."""
        page = await context.new_page()
        fragment = f"token={quote(token)}&project={quote(PROJECT)}&route={quote(route)}"
        await page.goto(f"{self.base}/#{fragment}")
        await expect(page.locator("main h1")).to_be_visible(timeout=WAIT_MS)
        return page

    async def screenshot(self, page: Page, name: str) -> Path:
        path = self.shots / f"{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        return path


def state_cell(page: Page, page_name: str, run_id: str) -> Locator:
    if page_name in LIST_PAGES:
        return page.locator(f'tr[data-run-id="{run_id}"] .state')
    return page.locator(".run-state .state")


@contextlib.asynccontextmanager
async def heartbeating(
    runtime: ScriptedRuntime, active: list[str], limit: int = 1
) -> AsyncIterator[None]:
    """Heartbeats every second (the list ``active`` is read each time), so leases stay
    renewed however slowly the browser goes."""

    async def beat() -> None:
        while True:
            await runtime.heartbeat(limit=limit, active=list(active))
            await asyncio.sleep(1.0)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
