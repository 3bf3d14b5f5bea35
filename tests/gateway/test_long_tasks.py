"""Long tasks over REST against a live stack (gRPC services + gateway on loopback), on SQLite
and PostgreSQL: create, read, list, the commands on the etag read (a stale one is a 409 that
changes nothing, a move the rules refuse another), a decision answered, the log and the
Markdown export; every route wants a token, and another project's task is a missing one.

No watcher runs here: the attempt a queued task would get is started through the door, as
the scheduler would, and it asks its question through the door, as the runtime would."""

from __future__ import annotations

from typing import Any

import httpx

from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from services.bootstrap import long_tasks
from tests.gateway.test_rest import assert_problem
from tests.support.gateway_stack import ALL, P_TOKEN, Q_TOKEN, GatewayStack, bearer
from tests.support.snapshot import snapshot

AUTH = bearer(ALL)
TASKS = "/v1/projects/proj-p/longTasks"
REPORT = f"{TASKS}/report"
SCHEDULER = Actor(ActorType.SCHEDULER, "long-task-scheduler")


def task_body(task_id: str = "report", **fields: Any) -> dict[str, Any]:
    return {
        "long_task_id": task_id,
        "owner_id": "alice",
        "goal": "Publish the weekly report",
        "constraints": ["never email customers"],
        "steps": [
            {
                "step_id": "build",
                "title": "Build it",
                "side_effect": "SIDE_EFFECT_CLASS_PURE",
                "action": {"run": "make report", "writes": "out/report.md"},
            },
            {
                "step_id": "upload",
                "title": "Upload it",
                "side_effect": "SIDE_EFFECT_CLASS_QUERYABLE",
                "action": {"run": "upload", "receipt": "json"},
                "probe": {"run": "uploaded"},
            },
        ],
        "criteria": [
            {
                "criterion_id": "exists",
                "text": "The report exists",
                "checker_kind": "file_exists",
                "checker": {"path": "out/report.md"},
            },
            {"criterion_id": "tone", "text": "It reads well", "optional": True},
        ],
        "budget": {"max_attempts": 5, "lifetime": "172800s"},
        **fields,
    }


async def _created(http: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await http.post(TASKS, json=task_body(**fields), headers=AUTH)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def _command(
    http: httpx.AsyncClient, verb: str, body: dict[str, Any], path: str = REPORT
) -> dict[str, Any]:
    response = await http.post(f"{path}:{verb}", json=body, headers=AUTH)
    assert response.status_code == 200, (verb, response.text)
    task: dict[str, Any] = response.json()
    assert response.headers["etag"] == task["etag"]
    return task


async def test_a_long_task_over_rest_from_create_to_export(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    # Create: 201, Location, ETag; planned; the draft's steps and criteria as asked.
    response = await http.post(TASKS, json=task_body(), headers=AUTH)
    assert response.status_code == 201, response.text
    task = response.json()
    assert response.headers["location"] == REPORT
    assert response.headers["etag"] == task["etag"]
    assert task["name"] == "projects/proj-p/longTasks/report"
    assert task["state"] == "LONG_TASK_STATE_PLANNED" and task["plan_version"] == 1
    assert [s["step_id"] for s in task["steps"]] == ["build", "upload"]
    assert task["steps"][1]["side_effect"] == "SIDE_EFFECT_CLASS_QUERYABLE"
    assert task["steps"][0]["action"] == {"run": "make report", "writes": "out/report.md"}
    exists, tone = task["criteria"]
    assert exists["checker_kind"] == "file_exists" and exists["required"]
    assert tone["subjective"] and not tone["required"]
    assert task["constraints"] == ["never email customers"]

    # Refused, changing nothing: the same id, another project's token, a body naming another
    # project, an unknown field, start that is not a boolean.
    before = await snapshot(stack.database_url)
    assert_problem(await http.post(TASKS, json=task_body(), headers=AUTH), 409, "LONG_TASK_EXISTS")
    assert_problem(
        await http.post(
            "/v1/projects/proj-q/longTasks", json=task_body("x"), headers=bearer(P_TOKEN)
        ),
        403,
        "PERMISSION_DENIED",
    )
    for bad in (
        task_body("x", project_id="proj-q"),
        task_body("x", colour="red"),
        task_body("x", start="yes"),
        task_body("x", steps=[]),
    ):
        assert_problem(await http.post(TASKS, json=bad, headers=AUTH), 400, "INVALID_ARGUMENT")
    assert await snapshot(stack.database_url) == before

    # Read; another project's token and a missing id answer alike.
    got = await http.get(REPORT, headers=AUTH)
    assert got.status_code == 200 and got.json() == task and got.headers["etag"] == task["etag"]
    other = assert_problem(
        await http.get(REPORT, headers=bearer(Q_TOKEN)), 404, "LONG_TASK_NOT_FOUND"
    )
    missing = assert_problem(
        await http.get(f"{TASKS}/nope", headers=AUTH), 404, "LONG_TASK_NOT_FOUND"
    )
    assert other["detail"] == missing["detail"].replace("nope", "report")

    # Start with the etag read: queued. The old etag is then stale: 409, nothing changes.
    queued = await _command(http, "start", {"etag": task["etag"], "note": "go"})
    assert queued["state"] == "LONG_TASK_STATE_QUEUED" and queued["etag"] != task["etag"]
    before = await snapshot(stack.database_url)
    assert_problem(
        await http.post(f"{REPORT}:pause", json={"etag": task["etag"]}, headers=AUTH),
        409,
        "LONG_TASK_VERSION_CONFLICT",
    )
    for body in (
        {},
        {"etag": queued["etag"], "project_id": "proj-q"},
        {"etag": queued["etag"], "why": "x"},
    ):
        assert_problem(
            await http.post(f"{REPORT}:pause", json=body, headers=AUTH), 400, "INVALID_ARGUMENT"
        )
    # A move the rules refuse: a queued task is not in recovery.
    assert_problem(
        await http.post(f"{REPORT}:clearRecovery", json={"etag": queued["etag"]}, headers=AUTH),
        409,
        "INVALID_LONG_TASK_TRANSITION",
    )
    assert await snapshot(stack.database_url) == before

    # Pause, resume; revise the plan; waive a criterion: each on the etag before it.
    paused = await _command(http, "pause", {"etag": queued["etag"], "note": "holiday"})
    assert paused["state"] == "LONG_TASK_STATE_PAUSED" and paused["display_state"] == "paused"
    resumed = await _command(http, "resume", {"etag": paused["etag"]})
    assert resumed["state"] == "LONG_TASK_STATE_QUEUED"
    revised = await _command(
        http,
        "revisePlan",
        {
            "etag": resumed["etag"],
            "reason": "check first",
            "steps": [
                {"step_id": "check", "title": "Check", "side_effect": "SIDE_EFFECT_CLASS_PURE"},
                *task_body()["steps"],
            ],
        },
    )
    assert revised["plan_version"] == 2
    assert [s["step_id"] for s in revised["steps"]] == ["check", "build", "upload"]
    waived = await _command(
        http,
        "editCriterion",
        {"etag": revised["etag"], "criterion_id": "exists", "waive": True, "reason": "manual"},
    )
    assert waived["plan_version"] == 3
    (exists_now,) = [c for c in waived["criteria"] if c["criterion_id"] == "exists"]
    assert not exists_now["required"] and exists_now["user_edited"]
    assert [p["version"] for p in waived["plan_versions"]] == [1, 2, 3]

    # An attempt (started as the scheduler would) asks a question; a person answers it once.
    door = long_tasks(stack.app)
    started = await door.start_attempt("report", SCHEDULER, int(waived["etag"]))
    assert started.made is not None
    await door.request_decision("report", started.made, "Which bucket?", ("eu", "us"))
    waiting = (await http.get(REPORT, headers=AUTH)).json()
    assert waiting["state"] == "LONG_TASK_STATE_WAITING_FOR_USER"
    assert waiting["display_state"] == "waiting_for_you" and waiting["wait_kind"] == "decision"
    (question,) = waiting["decisions"]
    assert question["state"] == "open" and question["options"] == ["eu", "us"]
    answered = await _command(
        http,
        "answer",
        {
            "etag": waiting["etag"],
            "decision_id": question["decision_id"],
            "answer": "eu",
            "note": "GDPR",
        },
    )
    assert answered["state"] == "LONG_TASK_STATE_QUEUED"
    (closed,) = answered["decisions"]
    assert closed["answer"] == "eu" and closed["note"] == "GDPR" and closed["state"] == "answered"
    assert len(answered["attempts"]) == 1
    assert_problem(
        await http.post(
            f"{REPORT}:answer",
            json={"etag": answered["etag"], "decision_id": question["decision_id"], "answer": "us"},
            headers=AUTH,
        ),
        409,
        "INVALID_LONG_TASK_TRANSITION",
    )

    # Cancel; a cancelled task cannot continue.
    cancelled = await _command(http, "cancel", {"etag": answered["etag"], "note": "not needed"})
    assert cancelled["state"] == "LONG_TASK_STATE_CANCELLED"
    assert_problem(
        await http.post(
            f"{REPORT}:continue", json={"etag": cancelled["etag"], "reason": "again"}, headers=AUTH
        ),
        409,
        "INVALID_LONG_TASK_TRANSITION",
    )

    # The log, oldest first, from a sequence on; the export in Markdown.
    events = (await http.get(f"{REPORT}/events", headers=AUTH)).json()["events"]
    sequences = [int(e["sequence"]) for e in events]
    assert sequences == sorted(sequences) and len(events) >= 8
    assert events[-1]["to_state"] == "cancelled"
    later = (await http.get(f"{REPORT}/events?after_sequence={sequences[-3]}", headers=AUTH)).json()
    assert later["events"] == events[-2:]
    exported = await http.get(f"{REPORT}/export", headers=AUTH)
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("text/markdown")
    assert "Publish the weekly report" in exported.text and exported.text.startswith("#")
    page = await http.get(f"{REPORT}/export?format=html", headers=AUTH)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text.startswith("<!DOCTYPE html>") and "Publish the weekly report" in page.text
    assert_problem(
        await http.get(f"{REPORT}/export?format=pdf", headers=AUTH), 400, "INVALID_ARGUMENT"
    )
    assert_problem(
        await http.get(f"{REPORT}/export", headers=bearer(Q_TOKEN)), 404, "LONG_TASK_NOT_FOUND"
    )


async def test_continue_a_finished_task_with_new_steps(http: httpx.AsyncClient) -> None:
    created = await _created(http, task_id="again")
    path = f"{TASKS}/again"
    cancelled = await _command(http, "cancel", {"etag": created["etag"]}, path)
    assert cancelled["state"] == "LONG_TASK_STATE_CANCELLED"
    # Continuation from a terminal but not cancelled task is the services' to test; here the
    # body reaches it whole: the steps and criteria as sent, the reason required.
    assert_problem(
        await http.post(f"{path}:continue", json={"etag": cancelled["etag"]}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )


async def test_a_continuation_over_rest_holds_the_task_and_says_so(
    http: httpx.AsyncClient,
) -> None:
    created = await _created(http, task_id="later")
    path = f"{TASKS}/later"
    window = {"cron": "0 9 * * *", "time_zone": "Europe/Berlin", "catchup_window": "600s"}
    refused = await http.post(
        f"{path}:scheduleContinuation",
        json={"etag": created["etag"], "continuation": {**window, "time_zone": "Mars/Olympus"}},
        headers=AUTH,
    )
    assert_problem(refused, 400, "INVALID_CONTINUATION")
    body = {"etag": created["etag"], "continuation": window}
    task = await _command(http, "scheduleContinuation", body, path)
    assert task["state"] == "LONG_TASK_STATE_QUEUED" and task["display_state"] == "queued"
    shown = task["continuation"]
    assert (shown["kind"], shown["waiting"], shown["catchup_window"]) == ("window", True, "600s")
    assert shown["label"] == "waiting for its next window at 09:00 (truerun must be running)"
    assert (await http.get(path, headers=AUTH)).json()["continuation"] == shown
    listed = (await http.get(TASKS, headers=AUTH)).json()["long_tasks"]
    [entry] = [t for t in listed if t["long_task_id"] == "later"]
    assert entry["continuation"] == shown and entry.get("queue_position", 0) == 0


async def test_listing_by_owner_active_and_pages(http: httpx.AsyncClient) -> None:
    first = await _created(http, task_id="one")
    await _created(http, task_id="two", owner_id="bob")
    await _created(http, task_id="three")
    await _command(http, "cancel", {"etag": first["etag"]}, f"{TASKS}/one")

    async def ids(query: str = "", token: str = ALL) -> list[str]:
        listed = await http.get(f"{TASKS}{query}", headers=bearer(token))
        assert listed.status_code == 200, listed.text
        return [t["long_task_id"] for t in listed.json()["long_tasks"]]

    assert await ids() == ["three", "two", "one"]  # newest first
    assert await ids("?owner_id=alice") == ["three", "one"]
    assert await ids("?active_only=true") == ["three", "two"]
    assert await ids("?active_only=false&owner_id=bob") == ["two"]
    page = (await http.get(f"{TASKS}?page_size=2", headers=AUTH)).json()
    assert [t["long_task_id"] for t in page["long_tasks"]] == ["three", "two"]
    assert page["long_tasks"][0]["steps"] == []  # a listing leaves the plan out
    rest = await http.get(TASKS, params={"page_token": page["next_page_token"]}, headers=AUTH)
    assert [t["long_task_id"] for t in rest.json()["long_tasks"]] == ["one"]
    assert rest.json()["next_page_token"] == ""
    # Another project's token sees an empty project; bad parameters are refused.
    assert await ids(token=Q_TOKEN) == []
    for query in ("?active_only=maybe", "?page_size=-1", "?page_token=garbage"):
        assert_problem(await http.get(f"{TASKS}{query}", headers=AUTH), 400, "INVALID_ARGUMENT")


async def test_every_long_task_route_wants_a_token(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    created = await _created(http)
    etag = {"etag": created["etag"]}
    before = await snapshot(stack.database_url)
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", TASKS, None),
        ("POST", TASKS, task_body("other")),
        ("GET", REPORT, None),
        ("POST", f"{REPORT}:start", etag),
        ("POST", f"{REPORT}:pause", etag),
        ("POST", f"{REPORT}:resume", etag),
        ("POST", f"{REPORT}:cancel", etag),
        ("POST", f"{REPORT}:clearRecovery", etag),
        ("POST", f"{REPORT}:continue", {**etag, "reason": "x"}),
        ("POST", f"{REPORT}:revisePlan", {**etag, "reason": "x"}),
        ("POST", f"{REPORT}:answer", {**etag, "decision_id": "d", "answer": "y"}),
        ("POST", f"{REPORT}:editCriterion", {**etag, "criterion_id": "tone", "waive": True}),
        ("POST", f"{REPORT}:scheduleContinuation", {**etag, "continuation": {"cron": "0 9 * * *"}}),
        ("GET", f"{REPORT}/events", None),
        ("GET", f"{REPORT}/export", None),
        ("POST", f"{TASKS}:act", {"task": "#1", "owner_id": "alice", "action": "pause"}),
        ("POST", f"{TASKS}:text", {"owner_id": "alice", "text": "/longtask pause #1"}),
    ]
    # No token, or an unknown one (alternately: past 20 failures of one token a minute its
    # next ones are refused with 429 instead).
    for index, (method, path, body) in enumerate(calls):
        headers = bearer("not-a-token") if index % 2 else {}
        answer = await http.request(method, path, json=body, headers=headers)
        assert_problem(answer, 401, "UNAUTHENTICATED")
        assert answer.headers["www-authenticate"] == "Bearer"
    # A token that does not see the project: every command is a missing task, changing nothing.
    for method, path, body in calls[3:]:
        if method == "POST":
            refused = await http.request(method, path, json=body, headers=bearer(Q_TOKEN))
            if path.endswith(":text"):  # as creating or listing there: the project is refused
                assert_problem(refused, 403, "PERMISSION_DENIED")
            else:
                assert_problem(refused, 404, "LONG_TASK_NOT_FOUND")
    assert await snapshot(stack.database_url) == before
    assert (await http.get(REPORT, headers=AUTH)).json() == created


async def test_one_action_contract_and_text_commands_over_rest(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    """``longTasks:act`` by the owner's handle, exactly once per action id; ``longTasks:text``
    for a chat without buttons; the handle shown on the task."""
    created = await _created(http)
    assert created["handle"] == "#1"
    act = {"task": "#1", "owner_id": "alice", "action": "pause", "action_id": "card-1"}
    started = await _command(http, "start", {"etag": created["etag"]})
    stale = {**act, "etag": created["etag"]}
    assert_problem(
        await http.post(f"{TASKS}:act", json=stale, headers=AUTH), 409, "LONG_TASK_VERSION_CONFLICT"
    )
    paused = await http.post(f"{TASKS}:act", json={**act, "etag": started["etag"]}, headers=AUTH)
    assert paused.status_code == 200, paused.text
    body = paused.json()
    assert body["outcome"] == "done" and body["long_task"]["state"] == "LONG_TASK_STATE_PAUSED"
    assert paused.headers["etag"] == body["long_task"]["etag"] == body["action_etag"]
    before = await snapshot(stack.database_url)
    again = await http.post(f"{TASKS}:act", json={**act, "etag": started["etag"]}, headers=AUTH)
    assert again.status_code == 200 and again.json()["outcome"] == "already_done"
    assert await snapshot(stack.database_url) == before
    assert_problem(
        await http.post(f"{TASKS}:act", json={**act, "project_id": "proj-q"}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    text = {"owner_id": "alice", "text": "/longtask resume #1", "action_id": "msg-1"}
    replied = await http.post(f"{TASKS}:text", json=text, headers=AUTH)
    assert replied.status_code == 200, replied.text
    answer = replied.json()
    assert answer["outcome"] == "done" and answer["reply"].startswith("#1: resume done")
    assert answer["long_task"]["state"] == "LONG_TASK_STATE_QUEUED"
    old_card = await http.post(
        f"{TASKS}:text",
        json={**text, "text": f"/longtask pause #1 {created['etag']}", "action_id": "msg-2"},
        headers=AUTH,
    )
    assert old_card.json()["refusal"] == "LONG_TASK_VERSION_CONFLICT"
    assert not old_card.json().get("long_task")
