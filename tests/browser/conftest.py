"""``dashboard``: a real ``truerun dev`` serving gRPC and the gateway (REST, SSE and the
dashboard's files) on loopback, and a fresh headless Debian Chromium driven by playwright.

The browser is ``/usr/bin/chromium`` from Debian's package (``scripts/ensure_chromium.sh``
installs it); a missing browser fails the tests, it never skips them. Screenshots go to
``test-artifacts/screenshots/<test>/`` (gitignored) and their folder is printed.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from playwright.async_api import BrowserContext, async_playwright

from tests.browser.dashboard import ADMIN_TOKEN, OPERATOR_TOKEN, PROJECT, TOKEN, Dashboard
from tests.support.auth import aio_channel
from tests.support.processes import Processes

CHROMIUM = os.environ.get("TRUERUN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HTTP_LISTENING = re.compile(r"^http listening on (\S+:\d+)$", re.MULTILINE)
DEV_ENV = {
    "TRUERUN_HTTP_ADDR": "127.0.0.1:0",
    "TRUERUN_API_TOKENS": f"{TOKEN}:{PROJECT};ops={OPERATOR_TOKEN}:{PROJECT}:operator;"
    f"admin={ADMIN_TOKEN}:*:operator",
    # A Start the scripted runtime holds back stays "starting" for as long as the test
    # looks (by default it turns unknown after 10 s).
    "TRUERUN_START_TIMEOUT_MS": "120000",
    # Small, so the output panel's test reaches the cap (and its marker) in a few lines;
    # no other page writes output.
    "TRUERUN_OUTPUT_MAX_BYTES": "400",
}
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)


@contextlib.asynccontextmanager
async def launch_browser(profile: Path) -> AsyncIterator[BrowserContext]:
    """A fresh Chromium profile (its own user data dir) in headless mode."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/ensure_chromium.sh (make test does)")
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 860},
        )
        try:
            yield context
        finally:
            await context.close()


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    async with launch_browser(tmp_path / "chromium-profile") as context:
        yield context


@contextlib.asynccontextmanager
async def serve_dashboard(
    base: Path, shots: Path, env: dict[str, str] | None = None
) -> AsyncIterator[Dashboard]:
    """A live ``truerun dev`` in ``base`` (data and logs); ``env`` overrides its settings.
    Tokens: TOKEN sees PROJECT; OPERATOR_TOKEN also may use the operator commands."""
    logs = base / "logs"
    logs.mkdir()
    procs = Processes(logs)
    channel: grpc.aio.Channel | None = None
    try:
        server = procs.dev(base / "data", {**DEV_ENV, **(env or {})})
        http = server.wait_for_log(HTTP_LISTENING, timeout=30).group(1)
        channel = aio_channel(server.address, TOKEN)
        shots.mkdir(parents=True, exist_ok=True)
        print(f"\nscreenshots: {shots}")
        yield Dashboard(f"http://{http}", server, channel, shots, procs)
    finally:
        if channel is not None:
            await channel.close(None)
        procs.close()
        leftovers = procs.leftovers()
    assert not leftovers, f"processes left behind: {leftovers}"


@pytest.fixture
async def dashboard(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Dashboard]:
    # A test may add settings: @pytest.mark.parametrize("dashboard", [{...}], indirect=True)
    env = getattr(request, "param", None)
    async with serve_dashboard(tmp_path, ARTIFACTS / request.node.name, env) as live:
        yield live
