"""Seed A §14 (UI rows): one run shows the identical display state on Queue, Run detail,
My Work and Automations while it moves queued -> starting -> running -> cancelling ->
cancelled; the pages follow by SSE without reloading and without adding rows; a refresh
changes nothing. The runtime side is a scripted runtime on the real runtime protocol, so
each state holds until the test moves it on."""

from __future__ import annotations

from playwright.async_api import BrowserContext, Page, expect
from truerun.v1 import runtime_service_pb2 as pb

from tests.browser.dashboard import OWNER, WAIT_MS, Dashboard, heartbeating, state_cell

PAGES = ("queue", "run", "mywork", "automations")


async def open_pages(dash: Dashboard, browser: BrowserContext, run_id: str) -> dict[str, Page]:
    pages = {
        "queue": await dash.open(browser, "/queue"),
        "run": await dash.open(browser, f"/runs/{run_id}"),
        "mywork": await dash.open(browser, "/mywork"),
        "automations": await dash.open(browser, "/automations"),
    }
    # My Work's owner is chosen in the page and remembered (localStorage).
    mywork = pages["mywork"]
    await mywork.locator("#owner-input").fill(OWNER)
    await mywork.locator("#owner-input").press("Enter")
    await expect(mywork.locator("main h2")).to_have_text(f"Runs of {OWNER}", timeout=WAIT_MS)
    for page in pages.values():
        # Gone after any reload: proves a state change arrived without one.
        await page.evaluate("window.__notReloaded = true")
    return pages


async def shown_everywhere(pages: dict[str, Page], run_id: str, state: str) -> str:
    """Waits until every page shows ``state`` for the run; the one text they all show."""
    for name, page in pages.items():
        await expect(state_cell(page, name, run_id)).to_have_attribute(
            "data-state", state, timeout=WAIT_MS
        )
    texts = {name: await state_cell(p, name, run_id).inner_text() for name, p in pages.items()}
    assert len(set(texts.values())) == 1, f"pages disagree about {run_id}: {texts}"
    return str(next(iter(texts.values())))


async def check_state(
    dash: Dashboard, pages: dict[str, Page], run_id: str, state: str, *, detail: str = ""
) -> None:
    text = await shown_everywhere(pages, run_id, state)
    assert detail in text, f"{state}: {text!r} does not say {detail!r}"
    for name, page in pages.items():
        assert await page.evaluate("window.__notReloaded === true"), f"{name} was reloaded"
    # Every page follows an event stream (the run's, or the project's), not the polling a
    # page falls back to while its stream is down.
    for page in pages.values():
        await expect(page.locator("#conn")).to_have_attribute("data-conn", "live")
    # Updated in place: the only run is still one row on the Queue page.
    await expect(pages["queue"].locator("table.runs tbody tr")).to_have_count(1)
    # What the API says is what the pages say.
    api_state = str((await dash.get_run(run_id))["display_state"])
    assert api_state == f"DISPLAY_STATE_{state.upper()}", api_state
    # A refresh changes nothing: the same text on every page, and in the API.
    before = await dash.get_run(run_id)
    for page in pages.values():
        await page.reload()
    assert await shown_everywhere(pages, run_id, state) == text
    after = await dash.get_run(run_id)
    assert (after["version"], after["event_sequence"]) == (
        before["version"],
        before["event_sequence"],
    ), "reading the pages changed the run"
    for name, page in pages.items():
        await page.evaluate("window.__notReloaded = true")
        await dash.screenshot(page, f"{state}-{name}")
    # The pictures show the state they are named after.
    assert (await dash.get_run(run_id))["version"] == before["version"]


async def test_one_run_shows_the_same_state_on_every_page(
    dashboard: Dashboard, browser: BrowserContext
) -> None:
    await dashboard.configure_agent("reporter")
    run = await dashboard.create_run(
        trigger_type="schedule", trigger_id="nightly", agent_id="reporter"
    )
    run_id = str(run["id"])
    pages = await open_pages(dashboard, browser, run_id)

    # No runtime yet: queued, and it says where in the queue.
    await check_state(dashboard, pages, run_id, "queued", detail="position 1 in the queue")

    runtime = dashboard.runtime()
    await runtime.connect()
    active: list[str] = []
    try:
        async with heartbeating(runtime, active):
            # Claimed and the Start sent; its answer held back: starting, never running.
            start = (await runtime.expect("start", timeout=30)).start
            assert start.run_id == run_id
            await check_state(dashboard, pages, run_id, "starting")

            await runtime.answer_start(start, accepted=True)
            await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
            await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
            active.append(start.runtime_task_id)
            await check_state(dashboard, pages, run_id, "running")

            # Cancel from the dashboard; the runtime's confirmation is held back.
            await pages["run"].locator("#cancel-run").click()
            cancel = (await runtime.expect("cancel", timeout=30)).cancel
            assert cancel.attempt_id == start.attempt_id
            await check_state(
                dashboard,
                pages,
                run_id,
                "cancelling",
                detail="waits for the runtime to confirm the process stopped",
            )

            await runtime.event(start, 3, pb.RUNTIME_EVENT_TYPE_CANCELLED)
            active.clear()
            await check_state(dashboard, pages, run_id, "cancelled")
    finally:
        await runtime.close()

    # The detail page's timeline shows the attempt's three dimensions and its fences.
    detail = pages["run"]
    attempt = detail.locator(f'li.attempt[data-attempt-id="{start.attempt_id}"]')
    dimensions = {"control": "cancelled", "observed": "cancelled", "sync": "in_sync"}
    for dimension, value in dimensions.items():
        chip = attempt.locator(f'[data-dimension="{dimension}"] .chip-value')
        await expect(chip).to_have_text(value)
    await expect(attempt.locator("time").first).to_be_visible()
    await expect(detail.locator("table.events tbody tr").last).to_contain_text("run.cancelled")
