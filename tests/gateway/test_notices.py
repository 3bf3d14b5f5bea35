"""Notices over REST and Server-Sent Events (docs/long-tasks.md "Notices"): the owner's
notices stream as they are committed (an approval request, then the interruption of its
attempt), a reconnect with Last-Event-ID resumes after the last one seen; the page lists
the same; another project's token is refused on every route; a webhook URL without a
server key is refused with its stable reason."""

from __future__ import annotations

import httpx

from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from services.bootstrap import long_tasks
from tests.support.gateway_stack import ALL, P_TOKEN, Q_TOKEN, GatewayStack, bearer
from tests.support.sse_client import open_stream

NOTICES = "/v1/projects/proj-p/notices"
SCHEDULER = Actor(ActorType.SCHEDULER, "long-task-scheduler")


async def test_notices_stream_as_committed_resume_and_stay_the_owners(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    made = await http.post(
        "/v1/projects/proj-p/longTasks",
        json={
            "long_task_id": "lt-n",
            "owner_id": "alice",
            "goal": "tell alice",
            "source_ref": "https://chat.example/threads/9",
            "start": True,
            "steps": [{"step_id": "s", "title": "s", "side_effect": "SIDE_EFFECT_CLASS_PURE"}],
            "criteria": [{"criterion_id": "c", "text": "c"}],
        },
        headers=bearer(ALL),
    )
    assert made.status_code == 201, made.text
    door = long_tasks(stack.app)
    mine = {"owner_id": "alice"}
    async with open_stream(
        http, f"{NOTICES}:stream", headers=bearer(P_TOKEN), params=mine
    ) as stream:
        started = await door.start_attempt("lt-n", SCHEDULER)
        attempt, run = started.made, started.run_id
        assert attempt is not None and run is not None
        run_events = f"/v1/projects/proj-p/runs/{run}/events"
        async with open_stream(http, f"{run_events}:stream", headers=bearer(P_TOKEN)) as on_run:
            await door.request_approval("lt-n", attempt, "send:team", "May I send it?")
            first = await stream.next_message()
            assert first.event == "notice"
            assert (first.json()["kind"], first.json()["title"]) == (
                "approval",
                "#1 asks for your approval",
            )
            assert first.json()["source_ref"] == "https://chat.example/threads/9"
            # the attempt's run shows it too: its SSE stream and its event page
            shown = await on_run.next_message()
            while shown.json()["type"] != "long_task.notice":
                shown = await on_run.next_message()
        payload = shown.json()["payload"]
        assert (payload["title"], payload["text"]) == (first.json()["title"], first.json()["text"])
        assert payload["command"] == first.json()["command"] and payload["handle"] == "#1"
        listed = (await http.get(run_events, headers=bearer(P_TOKEN))).json()["events"]
        assert [e["payload"] for e in listed if e["type"] == "long_task.notice"] == [payload]
        await door.attempt_ended("lt-n", attempt, "its run was lost")
        second = await stream.next_message()
        assert second.json()["kind"] == "interruption"
    resumed_headers = {**bearer(P_TOKEN), "Last-Event-ID": first.id}
    async with open_stream(
        http, f"{NOTICES}:stream", headers=resumed_headers, params=mine
    ) as again:
        assert (await again.next_message()).id == second.id  # after the first, only

    page = await http.get(NOTICES, params=mine, headers=bearer(P_TOKEN))
    assert page.status_code == 200, page.text
    assert [n["kind"] for n in page.json()["notices"]] == ["approval", "interruption"]
    assert page.json()["notices"][0]["cursor"] == first.id

    for path in (NOTICES, f"{NOTICES}:stream", "/v1/projects/proj-p/noticeDeliveries"):
        refused = await http.get(path, params=mine, headers=bearer(Q_TOKEN))
        assert refused.status_code == 403, (path, refused.text)
    no_key = await http.post(
        "/v1/projects/proj-p/noticeWebhooks",
        json={"owner_id": "alice", "url": "https://example.org/hook"},
        headers=bearer(P_TOKEN),
    )
    assert no_key.status_code == 400 and no_key.json()["reason"] == "NOTICE_WEBHOOK_INVALID"
    not_a_url = await http.post(
        "/v1/projects/proj-p/noticeWebhooks",
        json={"owner_id": "alice", "url": "file:///etc/passwd"},
        headers=bearer(P_TOKEN),
    )
    assert not_a_url.status_code == 400 and not_a_url.json()["reason"] == "NOTICE_WEBHOOK_INVALID"
