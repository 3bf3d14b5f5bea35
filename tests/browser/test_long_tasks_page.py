"""Issue #15 item 1 (seed C "macOS 桌面端展示" A-E on the web dashboard): long tasks walked
through their states by the real API, the people API over REST and the attempt API from a
scripted runtime (tests/browser/longtask_side.py), while one browser shows the "In progress"
group, the header badge and the task inspector. For every state the row shows the server's
projection (display state, label, progress), patched in place: the same DOM element, the
row count never grows, no reload. The recovery prompt's actions go through the real API.
One server and one browser context for the whole walk; screenshots per state."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from playwright.async_api import BrowserContext, Locator, Page, expect

from tests.browser.dashboard import WAIT_MS, Dashboard, heartbeating
from tests.browser.longtask_side import Attempts, People, draft, effect_draft, settle
from truerun_runtime.longtask import evidence, run_checker
from truerun_runtime.longtask.verify import verdict

# Records each notification the page shows (then shows it): what a person would see.
RECORD_NOTIFICATIONS = """
window.__notes = [];
const Real = window.Notification;
function Recording(title, options) {
  window.__notes.push([title, options && options.body]);
  return new Real(title, options);
}
Object.defineProperty(Recording, 'permission', { get: () => Real.permission });
Recording.requestPermission = (...args) => Real.requestPermission(...args);
window.Notification = Recording;
"""


def row(page: Page, task_id: str) -> Locator:
    return page.locator(f'#lt-list li.lt-row[data-long-task-id="{task_id}"]')


async def shows(
    page: Page, people: People, task_id: str, shown: str | tuple[str, ...] = ()
) -> dict[str, Any]:
    """Waits until the API shows the task ``shown`` (one of them; () any) and its row shows
    what the API says (display state, label, progress); the API's task."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        api = await people.get(task_id)
        el = row(page, task_id)
        seen = (
            await el.evaluate(
                "el => [el.dataset.shown, el.querySelector('.lt-label').textContent,"
                " el.querySelector('.lt-progress').textContent]"
            )
            if await el.count()
            else None
        )
        want = [api["display_state"], api["display_label"], api.get("progress", "")]
        wanted = (shown,) if isinstance(shown, str) else shown
        if seen == want and (not wanted or api["display_state"] in wanted):
            return api
        assert time.monotonic() < deadline, (
            f"{task_id}: the row shows {seen}, the API {want} ({api['state']}: "
            f"{api['state_reason']}; {[(d['state'], d.get('answer')) for d in api['decisions']]})"
        )
        await asyncio.sleep(0.2)


class Walk:
    """The browser pages and the rows seen so far (each marked once, to prove the same
    element is patched later)."""

    def __init__(self, dash: Dashboard, group: Page, people: People) -> None:
        self.dash, self.group, self.people = dash, group, people
        self.marks: dict[str, str] = {}

    async def mark(self, task_id: str) -> None:
        el = row(self.group, task_id)
        await expect(el).to_have_count(1, timeout=WAIT_MS)
        self.marks[task_id] = await el.evaluate("el => (el.__mark = `m${Math.random()}`)")

    async def state(self, task_id: str, shown: str, name: str, **words: str) -> dict[str, Any]:
        api = await shows(self.group, self.people, task_id, shown)
        el = row(self.group, task_id)
        for part, text in words.items():
            await expect(el.locator(f".lt-{part}")).to_contain_text(text, timeout=WAIT_MS)
        mark = await el.evaluate("el => (el.__mark = el.__mark || `m${Math.random()}`)")
        assert self.marks.setdefault(task_id, mark) == mark, f"{task_id}: a new row element"
        await expect(self.group.locator("#lt-list li")).to_have_count(len(self.marks))
        assert await self.group.evaluate("window.__notReloaded === true")
        await self.dash.screenshot(self.group, name)
        return api


async def test_long_tasks_through_their_states_on_the_dashboard(
    dashboard: Dashboard, browser: BrowserContext, tmp_path: Path
) -> None:
    dash, people = dashboard, People(dashboard)
    runtime = dash.runtime()
    await runtime.connect()
    active: list[str] = []
    attempts = Attempts(dash, runtime, active)
    report = tmp_path / "report.md"
    report.write_text("weekly\n")
    await browser.add_init_script(RECORD_NOTIFICATIONS)
    group = await dash.open(browser, "/queue")
    await group.evaluate("window.__notReloaded = true")
    # Notifications are asked for with a button, never on load.
    assert await group.evaluate("Notification.permission") == "default"
    await browser.grant_permissions(["notifications"], origin=dash.base)
    await group.locator(".lt-notify").click()
    await expect(group.locator(".lt-notify")).to_be_hidden()
    walk = Walk(dash, group, people)
    async with heartbeating(runtime, active, limit=8):
        # planned, then queued and running under its first attempt (step by step).
        await people.create(draft("walk", report))
        await walk.state("walk", "planned", "planned", label="planned, not started")
        inspector = await dash.open(browser, "/tasks/walk")
        await expect(inspector.locator(".lt-inspector-state .lt-row")).to_have_attribute(
            "data-shown", "planned", timeout=WAIT_MS
        )
        await people.command("walk", "start")
        sdk, _ = await attempts.attempt("walk")
        async with sdk.step("s1") as step:
            await walk.state("walk", "in_progress", "running", progress="step 1/3 · part 1")
            await step.complete([evidence("file", str(report), "part 1")])
        step2 = sdk.step("s2")
        await step2.__aenter__()
        await walk.state("walk", "in_progress", "running-2", progress="step 2/3 · part 2")
        await expect(group.locator("#lt-badge")).to_have_text("1 in progress", timeout=WAIT_MS)

        # waiting_for_approval, approved in the inspector; asked again: "2nd request".
        for nth, name in ((1, "approval"), (2, "approval-again")):
            asked = asyncio.create_task(sdk.request_approval("publish out/report.md", "May I?"))
            api = await walk.state("walk", "waiting_for_you", name, label="your approval")
            assert api["wait_kind"] == "approval" and api["state"].endswith("APPROVAL")
            if nth == 2:
                assert api["progress"].startswith("2nd request for the same permission"), api
            await expect(inspector.locator(".lt-scope")).to_contain_text("for this attempt")
            await expect(group.locator("#lt-badge")).to_have_text("1 waiting for you")
            await dash.screenshot(inspector, f"inspector-{name}")
            await inspector.locator('.lt-ask button[data-answer="grant"]').click()
            await settle(asked)
            await walk.state("walk", "in_progress", f"{name}-granted")
            # answered by this dashboard's own token (GET /v1/me): "by you"
            answered = inspector.locator(".lt-decisions .lt-past").first
            await expect(answered).to_contain_text("answered “grant” by you at ")
        await step2.complete([evidence("file", str(report), "part 2")])
        await step2.__aexit__(None, None, None)
        async with sdk.step("s3") as step:
            await step.complete([evidence("file", str(report), "part 3")])

        # verifying, then completed on the checker's verdict with its evidence.
        await sdk.ready_for_verification()
        await walk.state("walk", "in_progress", "verifying", label="checking the acceptance")
        checked = run_checker("file_exists", {"path": str(report)})
        assert checked is not None
        await sdk.record_verification([verdict("exists", "file_exists", checked)])
        await sdk.close()
        await walk.state("walk", "completed", "completed", label="done")
        await expect(inspector.locator('.lt-criterion[data-result="passed"]')).to_have_count(1)
        await expect(inspector.locator(".lt-step")).to_have_count(3)
        await expect(inspector.locator(".lt-class").first).to_have_text("pure")
        await dash.screenshot(inspector, "inspector-completed")
        # Chromium keeps at most 6 connections per host and every tab holds its streams
        # open: a tab done with is closed, or a later tab's POST would queue behind them.
        await inspector.close()

        # queued with a continuation: the stillness says what it waits for.
        await people.create(draft("later", report))
        window = {"cron": "0 9 * * *", "time_zone": "UTC"}
        await people.command("later", "scheduleContinuation", continuation=window)
        await walk.state("later", "queued", "queued", label="waiting for its next window at 09:00")
        # The row's main action acts at once with the etag it shows: Pause.
        await expect(row(group, "later").locator(".lt-action")).to_have_text("Pause")
        await row(group, "later").locator(".lt-action").click()
        await walk.state("later", "paused", "paused-from-row", label="paused by you")

        # paused (from planned), then cancelled.
        await people.create(draft("hold", report))
        await people.command("hold", "pause", note="holiday")
        await walk.state("hold", "paused", "paused", label="paused by you")
        # Goal and constraints edited in the inspector: a new plan version, by you; then a
        # criterion reworded: another one.
        editing = await dash.open(browser, "/tasks/hold")
        await editing.locator("#lt-goal-input").fill("weekly report hold, by noon")
        await editing.locator("#lt-constraints-input").fill("only the EU bucket\nno weekends")
        await editing.locator("#lt-reason-input").fill("a sharper goal")
        await editing.locator(".lt-goal-form button").click()
        plans = editing.locator(".lt-plans li")
        await expect(plans).to_have_count(2, timeout=WAIT_MS)
        await expect(plans.nth(1)).to_contain_text("v2 · you")
        await expect(plans.nth(1)).to_contain_text("a sharper goal")
        await editing.locator(".lt-criterion input").fill("the report exists in out/")
        await editing.locator(".lt-criterion .lt-edit button").click()
        await expect(plans).to_have_count(3, timeout=WAIT_MS)
        revised = await people.get("hold")
        assert revised["goal"] == "weekly report hold, by noon"
        assert revised["constraints"] == ["only the EU bucket", "no weekends"]
        assert revised["criteria"][0]["text"] == "the report exists in out/"
        await expect(editing.locator(".lt-criterion .lt-author")).to_have_text("you")
        await expect(row(group, "hold").locator(".lt-goal")).to_have_text(
            "weekly report hold, by noon", timeout=WAIT_MS
        )
        await dash.screenshot(editing, "inspector-plan-history")
        await editing.close()
        await people.command("hold", "cancel")
        await walk.state("hold", "cancelled", "cancelled", label="cancelled by you")

        # waiting_for_user (a question, count badge 1), answered in the inspector; with no
        # attempt left in its budget and no step done it ends failed (no useful result:
        # longtasks/domain/boundary.py).
        await people.create(draft("ask", report, budget={"max_attempts": 1}), start=True)
        await expect(row(group, "ask")).to_have_count(1, timeout=WAIT_MS)  # seen before it asks
        sdk, _ = await attempts.attempt("ask")
        await sdk.request_decision("Which bucket?", ["eu", "us"])
        await sdk.close()
        await walk.state("ask", "waiting_for_you", "waiting-for-user", count="1")
        # Its stillness as a duration the app's ticker counts on, in the same row.
        still = row(group, "ask").locator(".lt-still")
        await expect(still).to_contain_text("waiting for your answer for ")
        waited = await still.locator(".lt-waited").text_content()
        await expect(still.locator(".lt-waited")).not_to_have_text(waited or "", timeout=3000)
        asking = await dash.open(browser, "/tasks/ask")
        await expect(asking.locator(".lt-ask .lt-decision")).to_contain_text("Which bucket?")
        await dash.screenshot(asking, "inspector-question")
        await asking.locator('.lt-ask button[data-answer="eu"]').click()
        failed = await walk.state("ask", "failed", "failed", label="failed")
        assert failed["state"] == "LONG_TASK_STATE_FAILED", failed
        assert "budget of 1 attempts is used up; steps done: 0 of 3" in failed["state_reason"]
        await asking.close()

        # partial: the same one-attempt budget runs out after a step completed with its
        # evidence (a useful result), "partial 0/1" of the required criteria proven.
        await people.create(draft("part", report, budget={"max_attempts": 1}), start=True)
        await expect(row(group, "part")).to_have_count(1, timeout=WAIT_MS)
        sdk, start = await attempts.attempt("part")
        async with sdk.step("s1") as step:
            await step.complete([evidence("file", str(report), "part 1")])
        await sdk.close()
        await attempts.run_ends(start)
        partial = await walk.state("part", "partial", "partial", progress="partial 0/1")
        assert "steps done: 1 of 3" in partial["state_reason"], partial

        # recovery_required: the email step recorded its intent, the mail server's answer
        # (a receipt) and failed; the attempt's process died. The recovery prompt, written
        # for a person, names the step and its intent; each action on its own task, its
        # result read back through the API: Done, skip (skipped on your word), Not done,
        # retry (pending again), I'll check (nothing sent), Cancel it.
        for task_id, answer in (
            ("fixed", "skip"),
            ("again", "retry"),
            ("peek", "check"),
            ("dropped", "cancel"),
        ):
            await people.create(effect_draft(task_id), start=True)
            await expect(row(group, task_id)).to_have_count(1, timeout=WAIT_MS)
            sdk, start = await attempts.attempt(task_id)
            async with sdk.step("send") as step:
                await step.intent("mailto:team@example.com", "the weekly report email")
                await step.receipt("mailto:team@example.com", 1, "451: try again later")
                await step.fail("the mail server deferred it")
            await sdk.close()
            await attempts.run_ends(start)
            stopped = await walk.state(
                task_id, "recovery_required", f"recovery-{task_id}", label="interr"
            )
            assert stopped["recovery_resolutions"] == ["skip", "retry"], stopped
            fixing = await dash.open(browser, f"/tasks/{task_id}")
            prompt = fixing.locator(".lt-recovery .lt-prompt")
            await expect(prompt).to_contain_text(
                "Before it stopped it was working on “send the email”", timeout=WAIT_MS
            )
            await expect(prompt).to_contain_text("cannot tell whether its work was done")
            await expect(prompt).to_contain_text("target mailto:team@example.com")
            await expect(prompt).to_contain_text("summary “the weekly report email”")
            buttons = fixing.locator(".lt-recovery button")
            await expect(buttons).to_have_text(
                ["Done, skip", "Not done, retry", "Cancel it", "I'll check"]
            )
            await dash.screenshot(fixing, f"recovery-prompt-{task_id}")
            await fixing.locator(f'.lt-recovery button[data-answer="{answer}"]').click()
            if answer == "check":  # nothing is sent: it stays in recovery_required
                await expect(fixing.locator(".lt-checking")).to_contain_text("nothing was sent")
                after = await walk.state(task_id, "recovery_required", "recovery-check-stays")
                assert after["steps"][0]["state"] == "STEP_STATE_FAILED", after
                await fixing.close()
                continue
            lands = ("cancelled",) if answer == "cancel" else ("queued", "in_progress")
            after = await shows(group, people, task_id, lands)
            await expect(fixing.locator(".lt-recovery")).to_be_hidden()
            send = after["steps"][0]
            if answer == "skip":  # on your word: skipped, basis user, no evidence made up
                assert (send["state"], send["basis"]) == ("STEP_STATE_SKIPPED", "user"), send
                assert not send.get("evidence"), send
            elif answer == "retry":  # back to pending, the old try's intent gone
                assert (send["state"], send["basis"]) == ("STEP_STATE_PENDING", "user"), send
            else:
                assert send["state"] == "STEP_STATE_FAILED", send
            await dash.screenshot(fixing, f"recovery-{answer}-done")
            await fixing.close()
            if answer == "skip":  # its new attempt would hold one of the owner's 4 slots
                await people.command(task_id, "cancel", note="done with it")

        # An interruption after an intent: truerun cannot tell whether the email went out.
        # The effect question, written for a person, with its three actions (one task each).
        for task_id, answer in (("sent", "done"), ("resend", "retry"), ("look", "check")):
            await people.create(effect_draft(task_id), start=True)
            await expect(row(group, task_id)).to_have_count(1, timeout=WAIT_MS)
            sdk, start = await attempts.attempt(task_id)
            step = sdk.step("send")
            await step.__aenter__()
            await step.intent("mailto:team@example.com", "the weekly report email")
            await sdk.close()
            await attempts.run_ends(start)
            await walk.state(task_id, "waiting_for_you", f"interrupted-{task_id}", count="1")
            page = await dash.open(browser, f"/tasks/{task_id}")
            prompt = page.locator(".lt-recovery .lt-prompt")
            await expect(prompt).to_contain_text("cannot tell whether it was done", timeout=WAIT_MS)
            await expect(prompt).to_contain_text("target mailto:team@example.com")
            await expect(prompt).to_contain_text("summary “the weekly report email”")
            await dash.screenshot(page, f"recovery-prompt-{task_id}")
            await page.locator(f'.lt-recovery button[data-answer="{answer}"]').click()
            if answer == "check":  # nothing is sent: it goes on waiting for the answer
                await expect(page.locator(".lt-checking")).to_contain_text("nothing was sent")
                after = await walk.state(task_id, "waiting_for_you", "recovery-check")
                assert [d["state"] for d in after["decisions"]] == ["open"]
                await page.close()
                continue
            after = await shows(group, people, task_id, ("queued", "in_progress"))
            (decision,) = after["decisions"]
            assert (decision["state"], decision["answer"]) == ("answered", answer), decision
            send = after["steps"][0]["state"]
            # retry: it stays uncertain until the next attempt begins it again on your word
            want = "STEP_STATE_COMPLETED" if answer == "done" else "STEP_STATE_UNCERTAIN"
            assert send in (want, "STEP_STATE_RUNNING"), send
            await page.close()
        await expect(group.locator("#lt-list li")).to_have_count(len(walk.marks))
        # The header badge counts what is not finished; a click opens the list.
        badge = group.locator("#lt-badge")
        await expect(badge).to_have_text("4 in progress · 2 waiting for you", timeout=WAIT_MS)
        await badge.click()
        await expect(group.locator("#lt-heading")).to_be_focused()
        await dash.screenshot(group, "in-progress-group")

        # Queued behind the owner's other tasks (the scheduler runs at most 4 per owner; the
        # Starts nobody answers hold theirs): the label says how many are ahead, and one
        # fewer after one ahead is cancelled, in place.
        for task_id in ("q1", "q2", "q3", "q4"):
            await people.create(draft(task_id, report), start=True)
            await walk.mark(task_id)
        last = await walk.state("q4", "queued", "queued-ahead", label="ahead of it")
        ahead = int(last["queue_position"])
        assert ahead >= 2 and last["display_label"] == f"queued: {ahead} ahead of it", last
        await people.command("q2", "cancel")
        fewer = f"queued: {ahead - 1} ahead of it"
        await expect(row(group, "q4").locator(".lt-label")).to_have_text(fewer, timeout=WAIT_MS)
        await walk.state("q4", "queued", "queued-ahead-less", label=fewer)

    # One notification per transition to a state that needs a person or ends the task.
    notes = await group.evaluate("window.__notes")
    told: dict[str, list[str]] = {}
    for title, body in notes:
        told.setdefault(title.removeprefix("truerun: "), []).append(body)
    assert told == {
        "weekly report walk": [
            "waiting for your approval",
            "waiting for your approval",
            "done: every required criterion proven",
        ],
        "weekly report ask": ["needs your decision", "failed: no safe way on"],
        "weekly report part": ["partly done: required criteria unmet"],
        **{
            f"email the team {t}": ["interrupted: needs a check before it goes on"]
            for t in ("fixed", "again", "peek", "dropped")
        },
        "email the team sent": ["needs your decision"],
        "email the team resend": ["needs your decision"],
        "email the team look": ["needs your decision"],
    }, told
