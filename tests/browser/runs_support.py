"""What test_runs_pages.py asks the API and the page: lists and counts to compare rows and
count buttons with, the run's whole output, and the durations the page must show."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

from playwright.async_api import Page, expect

from tests.browser.dashboard import PROJECT, WAIT_MS, Dashboard

RUNS = f"/v1/projects/{PROJECT}/runs"


async def api(dashboard: Dashboard, path: str, **query: Any) -> Any:
    async with dashboard.http() as client:
        response = await client.get(path, params=query)
    assert response.status_code == 200, response.text
    return response.json()


async def post(dashboard: Dashboard, path: str, body: dict[str, str], token: str) -> None:
    async with dashboard.http() as client:
        client.headers["Authorization"] = f"Bearer {token}"
        response = await client.post(path, json=body)
    assert response.status_code == 200, response.text


async def shown_ids(page: Page, expected: set[str]) -> set[str]:
    rows = page.locator('table[data-table="queue"] tbody tr')
    await expect(rows).to_have_count(len(expected), timeout=WAIT_MS)
    return {await row.get_attribute("data-run-id") for row in await rows.all()} - {None}


async def check_view(page: Page, dashboard: Dashboard, query: dict[str, str]) -> None:
    """The rows are the API's list for ``query``; each count is the API's count."""
    listed = await api(dashboard, RUNS, **query, page_size=500)
    expected = {run["id"] for run in listed["runs"]}
    assert await shown_ids(page, expected) == expected
    counted = await api(
        dashboard, f"{RUNS}:count", **{k: v for k, v in query.items() if k != "display_state"}
    )
    total = page.locator('.count-button[data-state="all"] .count')
    await expect(total).to_have_text(str(counted["total"]), timeout=WAIT_MS)
    for entry in counted["counts"]:
        state = entry["display_state"].removeprefix("DISPLAY_STATE_").lower()
        cell = page.locator(f'.count-button[data-state="{state}"] .count')
        await expect(cell).to_have_text(str(entry["count"]))


def url_query(page: Page) -> dict[str, str]:
    _, _, query = page.url.partition("#/queue?")
    return {key: values[0] for key, values in parse_qs(query).items()}


def duration_text(ms: float) -> str:
    """durations.js durationText, for what the page must show for two recorded times."""
    if ms < 1000:
        return f"{round(ms)} ms"
    s = int(ms // 1000)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60} s"


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ms_between(a: str, b: str) -> float:
    return (parse_time(b) - parse_time(a)).total_seconds() * 1000


async def whole_output(dashboard: Dashboard, run_id: str) -> str:
    text, offset = "", 0
    while True:
        page = await api(dashboard, f"{RUNS}/{run_id}/output", offset=offset)
        text += "".join(chunk.get("text", "") for chunk in page["chunks"])
        if int(page["next_offset"]) in (offset, int(page["stored_bytes"])):
            return text
        offset = int(page["next_offset"])


OPERATOR_VERBS = ("resolve", "pause", "resume", "requeue", "fail")


async def check_offered(page: Page, dashboard: Dashboard, run_id: str) -> list[str]:
    """The run page offers exactly the API's allowed_commands: one button per allowed
    operator verb and no other, Cancel and Retry enabled only when allowed, Approve shown only
    when allowed. Returns the API's list."""
    allowed: list[str] = (await dashboard.get_run(run_id))["allowed_commands"]
    expected_ops = [verb for verb in OPERATOR_VERBS if verb in allowed]
    buttons = page.locator(".actions .op-button")
    await expect(buttons).to_have_count(len(expected_ops), timeout=WAIT_MS)
    for verb in expected_ops:
        await expect(page.locator(f"#op-{verb}")).to_be_visible()
    for verb, button in (("cancel", "#cancel-run"), ("retry", "#retry-run")):
        if verb in allowed:
            await expect(page.locator(button)).to_be_enabled(timeout=WAIT_MS)
        else:
            await expect(page.locator(button)).to_be_disabled(timeout=WAIT_MS)
    await expect(page.locator("#approve-run")).to_have_count(1 if "approve" in allowed else 0)
    return allowed
