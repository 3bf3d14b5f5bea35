"""The dashboard's frame: every page reachable by keyboard with a visible focus, the dark
theme toggles (and is remembered), nothing overflows a 360 px screen, and Capacity and
Agents show the live runtime instance and agent. Screenshots of every page, light and dark,
wide and narrow."""

from __future__ import annotations

from playwright.async_api import BrowserContext, Page, expect
from truerun.v1 import runtime_service_pb2 as pb

from tests.browser.dashboard import OWNER, WAIT_MS, Dashboard, heartbeating

# What shows that a page has read its data (for the screenshot).
READY = {"capacity": "tr[data-instance]", "runtimes": "tr[data-instance]"}
NAV = {
    "queue": "Queue",
    "mywork": "My Work",
    "automations": "Automations",
    "capacity": "Capacity",
    "agents": "Agents",
    "runtimes": "Runtimes",
}


async def focused(page: Page) -> dict[str, str]:
    value: dict[str, str] = await page.evaluate(
        """() => {
            const el = document.activeElement;
            const style = getComputedStyle(el);
            return {
                tag: el.tagName, page: el.dataset.page || '', id: el.id || '',
                outline: style.outlineStyle, width: style.outlineWidth,
            };
        }"""
    )
    return value


async def test_keyboard_theme_narrow_and_capacity(
    dashboard: Dashboard, browser: BrowserContext
) -> None:
    await dashboard.configure_agent("reporter")
    run = await dashboard.create_run(trigger_type="webhook", trigger_id="push", agent_id="reporter")
    runtime = dashboard.runtime()
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=2)
        start = (await runtime.expect("start", timeout=30)).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
        await runtime.acked(start.attempt_id, 2)
        async with heartbeating(runtime, [start.runtime_task_id], limit=2):
            await pages_by_keyboard_and_theme(dashboard, browser, str(run["id"]))
    finally:
        await runtime.close()


async def pages_by_keyboard_and_theme(
    dashboard: Dashboard, browser: BrowserContext, run_id: str
) -> None:
    page = await dashboard.open(browser, "/queue")

    # Keyboard: Tab reaches every nav link (with a visible focus ring); Enter opens it.
    reached: set[str] = set()
    for _ in range(20):
        await page.keyboard.press("Tab")
        now = await focused(page)
        if now["page"]:
            assert now["outline"] != "none" and now["width"] != "0px", now
            reached.add(now["page"])
        if reached == set(NAV):
            break
    assert reached == set(NAV), f"Tab reached only {sorted(reached)}"
    for name, title in NAV.items():
        link = page.locator(f'nav a[data-page="{name}"]')
        await link.focus()
        await page.keyboard.press("Enter")
        await expect(page).to_have_url(f"{dashboard.base}/#/{name}")
        await expect(page.locator("main h1")).to_have_text(title)
        await expect(link).to_have_attribute("aria-current", "page")
    # The theme toggle and the run's own controls are reachable too.
    toggle = page.locator("#theme-toggle")
    await toggle.focus()
    assert (await focused(page))["id"] == "theme-toggle"

    # My Work remembers its owner: chosen once, shown again after a reload.
    await page.goto(f"{dashboard.base}/#/mywork")
    await page.locator("#owner-input").fill(OWNER)
    await page.locator("#owner-input").press("Enter")
    row = page.locator(f'tr[data-run-id="{run_id}"] .state')
    await expect(row).to_have_attribute("data-state", "running", timeout=WAIT_MS)
    await page.reload()
    await expect(page.locator("#owner-input")).to_have_value(OWNER)
    await expect(row).to_have_attribute("data-state", "running", timeout=WAIT_MS)

    # Capacity: the instance with D = 2, O = 1 (the running task, counted once).
    await page.goto(f"{dashboard.base}/#/capacity")
    cells = page.locator("tr[data-instance] td")
    await expect(cells.nth(0)).to_have_text("2", timeout=WAIT_MS)
    await expect(cells.nth(1)).to_have_text("1", timeout=WAIT_MS)
    await expect(page.locator("tr[data-instance] th")).to_have_text(f"{OWNER} / ui-instance")

    # Agents: R and the live attempt.
    await page.goto(f"{dashboard.base}/#/agents")
    card = page.locator('section[data-agent-id="reporter"]')
    await expect(card.locator(".agent-r")).to_have_text("1", timeout=WAIT_MS)
    await expect(card.locator(".agent-live")).to_have_text("1", timeout=WAIT_MS)
    await expect(card.locator(f'li[data-run-id="{run_id}"] .state')).to_have_attribute(
        "data-state", "running"
    )

    # Theme: the toggle switches to dark and back, and the choice survives a reload.
    await page.emulate_media(color_scheme="light")
    await page.reload()
    root = page.locator("html")
    await expect(root).to_have_attribute("data-theme", "light")
    light_bg = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    await toggle.click()
    await expect(root).to_have_attribute("data-theme", "dark")
    await expect(toggle).to_have_attribute("aria-pressed", "true")
    dark_bg = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert dark_bg != light_bg
    await page.reload()
    await expect(root).to_have_attribute("data-theme", "dark")
    await toggle.click()
    await expect(root).to_have_attribute("data-theme", "light")

    # Every page, light and dark (the system preference, as most people get it), wide
    # and at 360 px, where nothing may overflow the screen sideways.
    await page.evaluate("localStorage.removeItem('truerun.theme')")
    routes = [*NAV, f"runs/{run_id}"]
    for width, height in ((1280, 860), (360, 740)):
        await page.set_viewport_size({"width": width, "height": height})
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            for route in routes:
                await page.goto(f"{dashboard.base}/#/{route}")
                await expect(page.locator("main h1")).to_be_visible()
                await expect(root).to_have_attribute("data-theme", scheme)
                # Let the page's first reads land before the picture is taken.
                name = route.split("/")[0]
                ready = page.locator(READY.get(name, ".state")).first
                await expect(ready).to_be_visible(timeout=WAIT_MS)
                await dashboard.screenshot(page, f"{name}-{scheme}-{width}")
                overflow = await page.evaluate(
                    "document.documentElement.scrollWidth - window.innerWidth"
                )
                assert overflow <= 0, f"{route} at {width}px overflows by {overflow}px"
                if name not in ("capacity", "runtimes"):
                    # The state itself stays on screen, not behind a sideways scroll. Found
                    # and measured in one step in the page: a stream (re)connect re-renders
                    # it, and a node found first and measured later may be gone by then.
                    right = await ready.evaluate("e => e.getBoundingClientRect().right")
                    assert 0 < right <= width, (route, right)
