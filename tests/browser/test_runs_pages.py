"""Runs on the dashboard, against one live ``truerun dev`` shared by the module's scenarios
(each uses its own owners, so their runs never meet): the Queue's filters and per-state
counts (the server's answers, carried in the address), the run page's log panel following a
live run (text, follow, search, download, the cap's marker, output notes folded in the event
list), the attempt timeline with its durations and evidence, and an operator command through
its reason dialog (refused in place for a non-operator token, then done by an operator), the
commands offered being exactly the API's allowed_commands."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, expect
from truerun.v1 import runtime_service_pb2 as pb

from tests.browser.conftest import ARTIFACTS, launch_browser, serve_dashboard
from tests.browser.dashboard import OPERATOR_TOKEN, WAIT_MS, Dashboard, heartbeating
from tests.browser.runs_support import (
    RUNS,
    api,
    check_offered,
    check_view,
    duration_text,
    ms_between,
    parse_time,
    post,
    shown_ids,
    url_query,
    whole_output,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
LINE = "step {:03d} of the report: ok\n"  # 27 bytes
DURATION = re.compile(r"^\d+ (ms|s|min \d+ s|h \d+ min)$")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Dashboard]:
    base = tmp_path_factory.mktemp("runs-pages")
    # A cap the log panel reaches after ~100 lines (enough to scroll inside its box).
    async with serve_dashboard(base, base / "shots", {"TRUERUN_OUTPUT_MAX_BYTES": "3000"}) as d:
        yield d


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BrowserContext]:
    async with launch_browser(tmp_path_factory.mktemp("runs-chromium")) as context:
        yield context


@pytest.fixture
def dashboard(live: Dashboard, request: pytest.FixtureRequest) -> Dashboard:
    shots = ARTIFACTS / request.node.name
    shots.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(live, shots=shots)


async def test_queue_filters_and_counts(dashboard: Dashboard, chromium: BrowserContext) -> None:
    await dashboard.configure_agent("f-agent")
    a1 = await dashboard.create_run(owner_id="f-alice", task_id="f-build")
    a2 = await dashboard.create_run(owner_id="f-alice", task_id="f-build")
    b1 = await dashboard.create_run(owner_id="f-bob", task_id="f-deploy", agent_id="f-agent")
    b2 = await dashboard.create_run(owner_id="f-bob", task_id="f-report")
    await post(dashboard, f"{RUNS}/{a2['id']}:pause", {"reason": "hold"}, OPERATOR_TOKEN)
    await post(dashboard, f"{RUNS}/{b2['id']}:fail", {"reason": "not needed"}, OPERATOR_TOKEN)

    page = await dashboard.open(chromium, "/queue")
    await page.locator("#filter-owner").fill("f-bob")
    await page.locator("#filter-owner").press("Enter")
    await expect(page).to_have_url(re.compile(r"#/queue\?owner=f-bob$"), timeout=WAIT_MS)
    await check_view(page, dashboard, {"owner_id": "f-bob"})
    assert await shown_ids(page, {b1["id"], b2["id"]}) == {b1["id"], b2["id"]}

    # A state's count is a button that filters by that state.
    await page.locator('.count-button[data-state="failed"]').click()
    await expect(page).to_have_url(re.compile(r"state=failed&owner=f-bob$"), timeout=WAIT_MS)
    await check_view(page, dashboard, {"owner_id": "f-bob", "display_state": "failed"})
    await dashboard.screenshot(page, "queue-filtered")

    # Free text and agent; then a time range from the second run on.
    await page.locator("#filter-clear").click()
    await page.locator("#filter-q").fill("F-BUILD")
    await expect(page).to_have_url(re.compile(r"#/queue\?q=F-BUILD$"), timeout=WAIT_MS)
    await check_view(page, dashboard, {"text": "F-BUILD"})
    await page.locator("#filter-q").fill("")
    await page.locator("#filter-agent").fill("f-agent")
    await page.locator("#filter-agent").press("Enter")
    await check_view(page, dashboard, {"agent_id": "f-agent"})
    await page.locator("#filter-clear").click()
    second = parse_time(a2["create_time"])
    local = second.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")
    await page.locator("#filter-from").fill(local)
    await page.locator("#filter-owner").fill("f-alice")
    await page.locator("#filter-owner").press("Enter")
    await expect(page).to_have_url(re.compile(r"owner=f-alice&from=[^&]+$"), timeout=WAIT_MS)
    start = url_query(page)["from"]
    assert parse_time(start) == second.replace(microsecond=0)
    await check_view(page, dashboard, {"owner_id": "f-alice", "create_time_from": start})

    # The address is the view: a reload, and a new tab on the link, show the same.
    await page.reload()
    await expect(page.locator("#filter-owner")).to_have_value("f-alice", timeout=WAIT_MS)
    await expect(page.locator("#filter-from")).to_have_value(local)
    await check_view(page, dashboard, {"owner_id": "f-alice", "create_time_from": start})
    linked = await dashboard.open(chromium, "/queue?state=paused&owner=f-alice")
    await expect(linked.locator("#filter-state")).to_have_value("paused", timeout=WAIT_MS)
    assert await shown_ids(linked, {a2["id"]}) == {a2["id"]}
    await linked.close()

    # Durations tick in their own cells: the row stays the same element.
    await page.locator("#filter-clear").click()
    row = page.locator(f'tr[data-run-id="{a1["id"]}"]')
    cell = row.locator(".duration-cell")
    await expect(cell).to_have_text(re.compile(r"^waiting \d+"), timeout=WAIT_MS)
    await expect(row.locator(".age")).to_contain_text("ago")
    await row.evaluate("row => { row.dataset.probe = 'kept'; }")
    before = await cell.text_content()
    await expect(cell).not_to_have_text(before or "", timeout=WAIT_MS)
    assert await row.get_attribute("data-probe") == "kept"
    await dashboard.screenshot(page, "queue-counts")
    await page.close()


async def test_log_panel_follows_a_live_run_and_the_timeline(
    dashboard: Dashboard, chromium: BrowserContext, tmp_path: Path
) -> None:
    run = await dashboard.create_run(task_id="log-follow")
    runtime = dashboard.runtime()
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=1)
        start = (await runtime.expect("start", timeout=30)).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
        seq = 3
        async with heartbeating(runtime, [start.runtime_task_id]):
            page = await dashboard.open(chromium, f"/runs/{run['id']}")
            output = page.get_by_role("log", name="Output")
            follow = page.locator("#log-follow")
            # Written over time while the page is open: each batch arrives as text.
            for batch in range(6):
                for i in range(batch * 10 + 1, batch * 10 + 11):
                    await runtime.event(
                        start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload={"data": LINE.format(i)}
                    )
                    seq += 1
                await expect(output).to_contain_text(LINE.format(batch * 10 + 10), timeout=WAIT_MS)
            text = await output.text_content()
            assert text == "".join(LINE.format(i) for i in range(1, 61))  # text, in order
            await expect(follow).to_have_text("following")
            at_end = "e => e.scrollHeight - e.scrollTop - e.clientHeight < 4"
            assert await output.evaluate(at_end)
            # The log scrolls in its own box: the page stays short.
            assert await output.evaluate("e => e.scrollHeight > e.clientHeight")
            height = await page.evaluate("document.documentElement.scrollHeight")
            assert height < 2600, height

            # Scrolled up, it stays put as lines arrive; "Jump to latest" follows again.
            await output.evaluate("e => { e.scrollTop = 0; }")
            await expect(follow).to_have_text("paused (scrolled up)", timeout=WAIT_MS)
            for i in range(61, 66):
                await runtime.event(
                    start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload={"data": LINE.format(i)}
                )
                seq += 1
            await expect(output).to_contain_text(LINE.format(65), timeout=WAIT_MS)
            assert await output.evaluate("e => e.scrollTop") == 0
            await page.locator("#log-jump").click()
            await expect(follow).to_have_text("following")

            # Search: marks, a count, next and previous.
            search = page.locator("#log-search")
            await search.fill("step 042")
            await expect(page.locator("#log-count")).to_have_text("1 of 1", timeout=WAIT_MS)
            await expect(output.locator("mark.log-match.current")).to_have_text("step 042")
            await search.fill("STEP 01")
            await expect(page.locator("#log-count")).to_have_text("1 of 10", timeout=WAIT_MS)
            await page.locator("#log-next").click()
            await expect(page.locator("#log-count")).to_have_text("2 of 10")
            current = output.locator("mark.log-match.current")
            await expect(current).to_have_text("step 01")  # as written: "step 011 ..."
            assert await current.evaluate("m => m.nextSibling.textContent[0]") == "1"
            await page.locator("#log-prev").click()
            await page.locator("#log-prev").click()
            await expect(page.locator("#log-count")).to_have_text("10 of 10")
            await dashboard.screenshot(page, "log-search")

            # Past the cap (3000 bytes here) comes truerun's marker.
            for i in range(66, 131):
                await runtime.event(
                    start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload={"data": LINE.format(i)}
                )
                seq += 1
            await expect(output.locator(".output-note")).to_contain_text(
                "truncated", timeout=WAIT_MS
            )
            await expect(page.locator("#output-capped")).to_be_visible()
            await search.fill("")
            await runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, 0)
            panel = page.locator("section.output-panel")
            await expect(panel).to_have_attribute("data-ended", "true", timeout=WAIT_MS)
            await dashboard.screenshot(page, "log-panel")

        # Download: the attempt's whole output, as the REST route has it.
        async with page.expect_download() as info:
            await page.locator("#log-download").click()
        download = await info.value
        assert download.suggested_filename == f"run-{run['id'][-8:]}-attempt-1.log"
        saved = tmp_path / "run.log"
        await download.save_as(saved)
        stored = await whole_output(dashboard, run["id"])
        assert saved.read_text() == stored and LINE.format(42) in stored

        # The event list folds the output notes into one row with their count.
        events = (await api(dashboard, f"{RUNS}/{run['id']}/events", page_size=500))["events"]
        notes = [e for e in events if e["type"].startswith("attempt.output_")]
        assert notes
        group = page.locator("table.events tr.event-group").first
        await expect(group).to_contain_text(f"{len(notes)} output note", timeout=WAIT_MS)
        visible_notes = page.locator("table.events tr.event-note:visible")
        await expect(visible_notes).to_have_count(0)
        await group.locator("button").click()
        await expect(visible_notes).to_have_count(len(notes))

        # The timeline: the steps from the log, each with its time, duration and evidence.
        attempt = page.locator(f'li.attempt[data-attempt-id="{start.attempt_id}"]')
        steps = attempt.locator("li.step")
        await expect(steps.last).to_have_attribute("data-step", "ended", timeout=WAIT_MS)
        keys = [await s.get_attribute("data-step") for s in await steps.all()]
        assert keys[:2] == ["claimed", "fenced"] and keys[-2:] == ["running", "ended"], keys
        assert "accepted" in keys[2:-2], keys
        fence = attempt.locator('li.step[data-step="fenced"] .step-evidence')
        await expect(fence).to_contain_text("event #")
        await expect(fence).to_contain_text("the server's fence")
        running = attempt.locator('li.step[data-step="running"]')
        await expect(running.locator(".step-evidence")).to_contain_text("runtime seq 2")
        await expect(running.locator(".step-evidence")).to_contain_text("by runtime")
        await expect(running.locator(".step-duration")).to_contain_text("to ended: succeeded")
        await expect(attempt.locator('li.step[data-step="ended"] .step-label')).to_have_text(
            "ended: succeeded"
        )
        for step in (await steps.all())[:-1]:
            text = (await step.locator(".step-duration").text_content() or "").split(" to ")[0]
            assert DURATION.match(text), text
        after = await dashboard.get_run(run["id"])
        ran = duration_text(ms_between(after["start_time"], after["finish_time"]))
        await expect(page.locator("#run-ran-for")).to_have_text(ran)
        ended = duration_text(ms_between(after["create_time"], after["finish_time"]))
        await expect(page.locator("#run-ended-after")).to_have_text(f"{ended} from creation")
        await attempt.scroll_into_view_if_needed()
        await dashboard.screenshot(page, "attempt-timeline")
        await page.close()
    finally:
        await runtime.close()


async def test_operator_action_through_its_reason_dialog(
    dashboard: Dashboard, chromium: BrowserContext
) -> None:
    run = await dashboard.create_run(owner_id="op-owner", task_id="op-task")
    page = await dashboard.open(chromium, f"/runs/{run['id']}")
    # A queued run: what the API allows (cancel, pause and fail), nothing else.
    assert await check_offered(page, dashboard, run["id"]) == ["cancel", "pause", "fail"]

    await page.locator("#op-pause").click()
    dialog = page.locator("#op-dialog")
    await expect(dialog).to_be_visible()
    await page.locator("#op-confirm").click()
    await expect(page.locator("#op-error")).to_have_text("A reason is required.")
    await page.locator("#op-reason").fill("maintenance window")
    await page.locator("#op-confirm").click()
    # This token is no operator: the server's refusal, in the dialog.
    error = page.locator("#op-error")
    await expect(error).to_contain_text(
        "an operator command needs an operator token", timeout=WAIT_MS
    )
    await expect(error).to_contain_text("(PERMISSION_DENIED)")
    await expect(dialog).to_be_visible()
    await dashboard.screenshot(page, "operator-refused")
    await page.locator("#op-cancel").click()
    await expect(dialog).to_have_count(0)
    assert (await dashboard.get_run(run["id"]))["status"] == "RUN_STATUS_QUEUED"
    await page.close()

    page = await dashboard.open(chromium, f"/runs/{run['id']}", token=OPERATOR_TOKEN)
    await page.locator("#op-pause").click()
    await page.locator("#op-reason").fill("maintenance window from the dashboard")
    await page.locator("#op-confirm").click()
    await expect(page.locator("#op-dialog")).to_have_count(0, timeout=WAIT_MS)
    await expect(page.locator(".run-state .state")).to_have_attribute(
        "data-state", "paused", timeout=WAIT_MS
    )
    assert await check_offered(page, dashboard, run["id"]) == ["cancel", "resume", "fail"]
    after = await dashboard.get_run(run["id"])
    assert after["status"] == "RUN_STATUS_PAUSED"
    events = (await api(dashboard, f"{RUNS}/{run['id']}/events"))["events"]
    paused = [e for e in events if e["type"] == "run.paused"]
    assert len(paused) == 1, events
    assert paused[0]["payload"]["reason"] == "maintenance window from the dashboard"
    assert paused[0]["actor"] == {"type": "ACTOR_TYPE_OPERATOR", "id": "ops"}
    await dashboard.screenshot(page, "operator-paused")
    await page.close()


async def test_the_run_page_offers_what_the_api_allows(
    dashboard: Dashboard, chromium: BrowserContext
) -> None:
    """A run waiting for approval offers approve; a run whose Start was never answered (the
    domain's "stuck": started, no evidence that it runs) offers resolve, and resolving it
    through the dialog leaves a failed run that offers only retry."""
    waiting = await dashboard.create_run(owner_id="op-owner", requires_approval=True)
    page = await dashboard.open(chromium, f"/runs/{waiting['id']}")
    assert await check_offered(page, dashboard, waiting["id"]) == ["cancel", "approve"]
    await page.close()

    run = await dashboard.create_run(task_id="op-stuck")
    runtime = dashboard.runtime("ui-stuck")
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=1)
        await runtime.expect("start", timeout=30)  # held back: never answered
        page = await dashboard.open(chromium, f"/runs/{run['id']}", token=OPERATOR_TOKEN)
        await expect(page.locator(".run-state .state")).to_have_attribute(
            "data-state", "starting", timeout=WAIT_MS
        )
        assert await check_offered(page, dashboard, run["id"]) == ["cancel", "resolve"]
        await page.locator("#op-resolve").click()
        await page.locator("#op-resolution").select_option("failed")
        await page.locator("#op-reason").fill("the host was reimaged before it answered")
        await page.locator("#op-confirm").click()
        await expect(page.locator("#op-dialog")).to_have_count(0, timeout=WAIT_MS)
        await expect(page.locator(".run-state .state")).to_have_attribute(
            "data-state", "failed", timeout=WAIT_MS
        )
        assert await check_offered(page, dashboard, run["id"]) == ["retry"]
        await dashboard.screenshot(page, "operator-resolved")
        await page.close()
    finally:
        await runtime.close()


PURE_CHECKS = (Path(__file__).parent / "runs_pure_checks.js").read_text()


async def test_pure_display_functions(dashboard: Dashboard, chromium: BrowserContext) -> None:
    """The modules' pure functions, in the browser that runs them: the timeline's steps for
    what the live scenario does not reach (cancel requested, unknown, lost, a time only the
    attempt record has), duration and age texts, search, the filter's address form and
    client-side match, and that the operator commands offered are the server's list alone."""
    page = await dashboard.open(chromium, "/agents")
    got = await page.evaluate(PURE_CHECKS)
    assert got["keys"] == ["claimed", "fenced", "cancel_requested", "unknown", "lost", "ended"]
    assert got["evidence"][0] == "attempt record: claim_time"
    assert got["evidence"][1] == (
        "event #4 attempt.start_requested · by scheduler:d · the server's fence"
    )
    assert got["evidence"][2] == "event #6 run.cancel_requested · by user:ann · reason: stop"
    assert got["evidence"][4] == "event #9 attempt.lost · by system · reason: runtime gone"
    assert got["evidence"][5] == "attempt record: finish_time"
    assert got["durations"] == ["850 ms", "45 s", "3 min 5 s", "2 h 4 min"]
    assert got["ago"] == ["just now", "12 s ago", "3 min ago"]
    assert got["found"] == [[0, 4], [8, 12], [17, 21]]
    assert got["parsed"] == {
        "state": "running",
        "owner": "x",
        "agent": "",
        "task": "",
        "from": "",
        "to": "",
        "q": "a b",
    }
    assert got["badState"] == ""
    assert got["query"] == "?state=failed&owner=x&q=a+b"
    assert got["matches"] == [True, False]
    assert got["verbs"] == ["pause,fail", "resume", "", ""]
    await page.close()
