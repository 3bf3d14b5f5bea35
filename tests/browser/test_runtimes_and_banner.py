"""Issue #15 item 2 (area E), in Debian Chromium against a real `truerun dev`:

- the Runtimes page lists two scripted runtimes (real runtime streams) with D, O, runtime
  active, last heartbeat and agent version; one disconnects and, once its observation's TTL
  passes, its row says so in the server's words while the other stays connected; the next
  instance of its lineage connects and the row says it was replaced;
- the Agents page lists a configured agent no run names;
- the server-down banner: `truerun dev` is SIGKILLed while the Queue shows a running run ->
  the banner says since when and the row is marked "last known" (not plain running); the
  server restarts on the same ports and data dir -> the banner goes away and the row shows
  what the API says now;
- a gateway whose services are down (it answers 503 problem+json) gets the banner too.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest
from playwright.async_api import BrowserContext, expect
from truerun.v1 import runtime_service_pb2 as pb

from gateway.app import GatewayConfig
from gateway.server import HttpServer
from gateway.tokens import ApiTokens
from tests.browser.conftest import DEV_ENV
from tests.browser.dashboard import PROJECT, TOKEN, WAIT_MS, Dashboard, heartbeating
from tests.support.scripted_runtime import ScriptedRuntime

TTL_MS = 3000  # the stale row appears within seconds, not the default 15 s


@contextlib.asynccontextmanager
async def connected(runtime: ScriptedRuntime, limit: int) -> AsyncIterator[list[str]]:
    await runtime.connect()
    active: list[str] = []
    try:
        async with heartbeating(runtime, active, limit=limit):
            yield active
    finally:
        await runtime.close()


@pytest.mark.parametrize(
    "dashboard", [{"TRUERUN_OBSERVATION_TTL_MS": str(TTL_MS)}], indirect=True, ids=["ttl-3s"]
)
async def test_runtimes_page_and_agents_page(dashboard: Dashboard, browser: BrowserContext) -> None:
    # The page token sees the runtimes of owners with runs in its project: one run, pinned
    # to rt-a, so rt-a holds one durable row (O = 1) that it does not report active.
    run = await dashboard.create_run(pinned_runtime_instance_id="rt-a")
    await dashboard.configure_agent("idle-agent", concurrency=1)
    a = dashboard.runtime("rt-a", agent_version="truerun-agent/1.2.3")
    b = dashboard.runtime("rt-b", agent_version="truerun-agent/0.9.0", lineage="ui-pod")
    page = await dashboard.open(browser, "/runtimes")
    async with connected(a, limit=2):
        start = (await a.expect("start", timeout=30)).start
        assert start.run_id == run["id"]
        async with connected(b, limit=3):
            rows = page.locator("table.runtimes tbody tr")
            await expect(rows).to_have_count(2, timeout=WAIT_MS)
            for instance, limit, occupied, version in (
                ("rt-a", "2", "1", "truerun-agent/1.2.3"),
                ("rt-b", "3", "0", "truerun-agent/0.9.0"),
            ):
                shown = page.locator(f'table.runtimes tr[data-instance="{instance}"]')
                await expect(shown).to_have_attribute("data-state", "connected", timeout=WAIT_MS)
                await expect(shown.locator(".rt-limit")).to_have_text(limit)
                await expect(shown.locator(".rt-occupied")).to_have_text(occupied, timeout=WAIT_MS)
                await expect(shown.locator(".rt-active")).to_have_text("0")
                await expect(shown.locator(".rt-version")).to_have_text(version)
                await expect(shown.locator(".rt-heartbeat time")).to_be_visible()
                await expect(shown.locator(".hb-age")).to_have_text(re.compile(r"^\d+ s ago$"))
            await dashboard.screenshot(page, "runtimes-connected")
            # Capacity lists them too, rt-b without any attempt of the project.
            capacity = await dashboard.open(browser, "/capacity")
            heads = capacity.locator("tr[data-instance] th")
            await expect(heads).to_have_text(
                ["ui-owner / rt-a", "ui-owner / rt-b"], timeout=WAIT_MS
            )
            await capacity.close()
        # rt-b's stream is closed and its heartbeats stopped: stale once the TTL passes.
        gone = page.locator('table.runtimes tr[data-instance="rt-b"]')
        await expect(gone).to_have_attribute("data-state", "stale", timeout=WAIT_MS)
        await expect(gone.locator(".runtime-state")).to_contain_text(
            "no heartbeat within the observation TTL (3 s)"
        )
        kept = page.locator('table.runtimes tr[data-instance="rt-a"]')
        await expect(kept).to_have_attribute("data-state", "connected")
        await dashboard.screenshot(page, "runtimes-one-stale")
        # The next instance of rt-b's lineage says Hello: rt-b is recorded as replaced.
        async with connected(dashboard.runtime("rt-c", lineage="ui-pod"), limit=1):
            newer = page.locator('table.runtimes tr[data-instance="rt-c"]')
            await expect(newer).to_have_attribute("data-state", "connected", timeout=WAIT_MS)
            await expect(gone.locator(".runtime-state")).to_contain_text(
                "replaced by a newer instance of lineage ui-pod", timeout=WAIT_MS
            )
            await expect(gone.locator(".rt-lineage")).to_contain_text("ui-pod · replaced")
            await dashboard.screenshot(page, "runtimes-replaced")

    agents = await dashboard.open(browser, "/agents")
    card = agents.locator('section.agent[data-agent-id="idle-agent"]')
    await expect(card.locator(".agent-r")).to_have_text("1", timeout=WAIT_MS)
    await expect(card).to_contain_text("No live attempts.")
    await expect(agents.locator("main .empty")).to_be_hidden()
    await dashboard.screenshot(agents, "agents-configured-no-runs")


async def test_banner_when_truerun_dev_is_killed_and_gone_when_it_is_back(
    dashboard: Dashboard, browser: BrowserContext
) -> None:
    run_id = str((await dashboard.create_run())["id"])
    runtime = dashboard.runtime()
    page = await dashboard.open(browser, "/queue")
    state = page.locator(f'tr[data-run-id="{run_id}"] .state')
    async with connected(runtime, limit=1) as active:
        start = (await runtime.expect("start", timeout=30)).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
        active.append(start.runtime_task_id)
        await expect(state).to_have_attribute("data-state", "running", timeout=WAIT_MS)
        banner = page.locator("#server-banner")
        await expect(banner).to_be_hidden()

        dashboard.server.kill()  # SIGKILL: no drain, no goodbye
        await expect(banner).to_be_visible(timeout=WAIT_MS)
        await expect(banner).to_contain_text("truerun is unreachable since")
        await expect(banner).to_contain_text("showing what was last known")
        await expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_have_class(
            re.compile(r"\bstale\b")
        )
        await expect(state.locator(".last-known")).to_have_text("last known")
        await dashboard.screenshot(page, "banner-server-killed")

        assert dashboard.procs is not None
        http = dashboard.base.removeprefix("http://")
        dashboard.server = dashboard.procs.dev(
            dashboard.server.data_dir,
            {**DEV_ENV, "TRUERUN_HTTP_ADDR": http},
            grpc_addr=dashboard.server.address,
        )
        await expect(banner).to_be_hidden(timeout=WAIT_MS)
        await expect(page.locator(".last-known")).to_have_count(0)
        # Read again: the row shows what the API says now (the runtime's stream died with
        # the server, so the run may have moved on from running meanwhile).
        for _ in range(50):
            api_state = str((await dashboard.get_run(run_id))["display_state"])
            shown = await state.get_attribute("data-state")
            if api_state == f"DISPLAY_STATE_{(shown or '').upper()}":
                break
            await asyncio.sleep(0.2)
        assert api_state == f"DISPLAY_STATE_{(shown or '').upper()}", (api_state, shown)
        await dashboard.screenshot(page, "banner-server-back")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_banner_when_the_gateway_answers_but_its_services_are_down(
    browser: BrowserContext,
) -> None:
    tokens = ApiTokens.parse(f"{TOKEN}:{PROJECT}")
    server = HttpServer(GatewayConfig(f"127.0.0.1:{_closed_port()}", tokens), "127.0.0.1:0")
    await server.start()
    try:
        page = await browser.new_page()
        fragment = f"token={quote(TOKEN)}&project={quote(PROJECT)}&route=/queue"
        await page.goto(f"http://{server.address}/#{fragment}")
        banner = page.locator("#server-banner")
        await expect(banner).to_be_visible(timeout=WAIT_MS)
        await expect(banner).to_contain_text("truerun's services are unavailable since")
        await expect(banner).to_contain_text("the gateway answers 503")
    finally:
        await server.stop()
