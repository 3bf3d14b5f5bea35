"""The Automations page against a real `truerun dev`: a schedule created over REST that
fires every second is listed with its timing and next fire; its own page shows its run (in
the state the run pages show) and what it did since (a fire while that run is unfinished is
skipped, in the server's words); pausing it from the page with a note shows the note."""

from __future__ import annotations

import re

from playwright.async_api import BrowserContext, expect

from tests.browser.dashboard import OWNER, PROJECT, WAIT_MS, Dashboard


async def test_a_schedule_its_runs_and_a_pause_with_a_note(
    dashboard: Dashboard, browser: BrowserContext
) -> None:
    async with dashboard.http() as client:
        created = await client.post(
            f"/v1/projects/{PROJECT}/schedules",
            json={
                "schedule_id": "every-second",
                "display_name": "Every second",
                "template": {"owner_id": OWNER, "task_id": "tick"},
                "spec": {"interval": "1s"},
            },
        )
    assert created.status_code == 201, created.text

    page = await dashboard.open(browser, "/automations")
    row = page.locator('tr[data-schedule-id="every-second"]')
    await expect(row.locator(".timing")).to_have_text("every 1s", timeout=WAIT_MS)
    await expect(row.locator(".next-fire time")).to_be_visible()
    await expect(row.locator(".next-fire .relative")).to_have_text(
        re.compile(r"\((in \d+ s|now|\d+ s ago)\)")
    )
    await expect(row.locator(".overlap")).to_have_text("skip")
    await expect(row.locator(".sched-badge")).to_have_text("active")

    # Its own page: the run its first fire created (queued: nothing runs it), and the
    # later fires skipped because of it, as the server words it.
    await row.locator("a.schedule-link").click()
    await expect(page).to_have_url(f"{dashboard.base}/#/automations/{PROJECT}/every-second")
    run_state = page.locator('table[data-table="schedule-runs"] tr[data-run-id] .state')
    await expect(run_state.first).to_have_attribute("data-state", "queued", timeout=WAIT_MS)
    skipped = page.locator('.sched-events tr[data-type="skipped"] .message').first
    await expect(skipped).to_contain_text("skipped", timeout=WAIT_MS)
    await expect(page.locator(".schedule-facts .last-outcome")).not_to_have_text("—")
    await dashboard.screenshot(page, "schedule")

    # Back on the list: pause with a note; the badge shows it, and the next fire is none.
    await page.goto(f"{dashboard.base}/#/automations")
    await row.locator("button.pause").click()
    await row.locator(".pause-note").fill("vendor outage")
    await row.locator(".pause-confirm").click()
    badge = row.locator('.sched-badge[data-paused="true"]')
    await expect(badge).to_have_text(re.compile(r"^paused by .+: vendor outage$"), timeout=WAIT_MS)
    await expect(row.locator(".next-fire")).to_have_text("none while paused")
    await expect(row.locator("button.resume")).to_be_visible()
    await dashboard.screenshot(page, "automations-paused")
