"""The run page's output panel: the current attempt's output as text, followed live over the
output stream while the run runs, truerun's notes (here: the cap's truncated marker) styled
apart, and the stream closed once the run ended and everything was shown."""

from __future__ import annotations

from playwright.async_api import BrowserContext, expect
from truerun.v1 import runtime_service_pb2 as pb

from tests.browser.dashboard import WAIT_MS, Dashboard, heartbeating

FIRST = "compiling <module> & linking\n"
LIVE = [f"step {i:02d} of the report: ok\n" for i in range(1, 16)]


async def test_run_page_shows_and_follows_the_output(
    dashboard: Dashboard, browser: BrowserContext
) -> None:
    run = await dashboard.create_run()
    runtime = dashboard.runtime()
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=1)
        start = (await runtime.expect("start", timeout=30)).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
        await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload={"data": FIRST})
        await runtime.acked(start.attempt_id, 3)
        async with heartbeating(runtime, [start.runtime_task_id]):
            page = await dashboard.open(browser, f"/runs/{run['id']}")
            output = page.get_by_role("log", name="Output")
            await expect(output).to_have_text(FIRST, timeout=WAIT_MS)  # as text, not markup
            await expect(page.locator("#output-attempt")).to_have_text("attempt 1")
            assert await output.get_attribute("tabindex") == "0"  # keyboard-scrollable

            # Written while the page is open: it arrives by itself; past the cap (400 bytes
            # in this server) comes truerun's marker, styled as a note, not as output.
            for seq, line in enumerate(LIVE, start=4):
                payload = {"data": line}
                await runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload=payload)
            await expect(output).to_contain_text(LIVE[0], timeout=WAIT_MS)
            note = output.locator(".output-note")
            await expect(note).to_contain_text("truncated", timeout=WAIT_MS)
            assert await note.evaluate("e => getComputedStyle(e).fontStyle") == "italic"

            await runtime.event(start, 4 + len(LIVE), pb.RUNTIME_EVENT_TYPE_SUCCEEDED, 0)
            panel = page.locator("section.output-panel")
            await expect(panel).to_have_attribute("data-ended", "true", timeout=WAIT_MS)
            text = await output.text_content()
            assert text is not None and text.startswith(FIRST + LIVE[0])
            await dashboard.screenshot(page, "run-output")
    finally:
        await runtime.close()
