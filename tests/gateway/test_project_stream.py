"""The project-wide Server-Sent Events stream: ids are the events' cursors; a client killed and
reconnected 20 times mid-stream (resuming with Last-Event-ID) while runs are being created and
transitioned receives, in union, exactly the committed events of the project, in cursor order,
without duplicates; another project's events never appear; a project the token does not see
streams nothing."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.support.gateway_stack import ALL, P_TOKEN, GatewayStack, bearer
from tests.support.sse_client import open_stream

AUTH = bearer(ALL)
RECONNECTS = 20
PROJECT = "proj-p"


async def all_project_events(http: httpx.AsyncClient, project: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    cursor = ""
    while True:
        page = await http.get(
            f"/v1/projects/{project}/events",
            params={"after_cursor": cursor, "page_size": 50},
            headers=AUTH,
        )
        assert page.status_code == 200, page.text
        body = page.json()
        events.extend(body["events"])
        if not body["events"]:
            return events
        cursor = body["next_cursor"]


async def project_events_until(
    http: httpx.AsyncClient, project: str, seen: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The project's feed once ``seen`` holds for it (10 s at most). On PostgreSQL a committed
    event joins the feed once every transaction older than it has ended, in any database of
    the server (docs/events.md): another client's open transaction delays it, never drops it."""
    deadline = time.monotonic() + 10
    while True:
        events = await all_project_events(http, project)
        if seen(events) or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.05)


async def churn(http: httpx.AsyncClient, stop: asyncio.Event) -> int:
    """Create and transition runs in both projects until told to stop; how many runs."""
    made = 0
    while not stop.is_set() or made < 6:
        for project in (PROJECT, "proj-q"):
            runs = f"/v1/projects/{project}/runs"
            body = {"owner_id": "o", "task_id": f"t{made}", "requires_approval": made % 2 == 0}
            run = (await http.post(runs, json=body, headers=AUTH)).json()
            if made % 2 == 0:
                await http.post(f"{runs}/{run['id']}:approve", headers=AUTH)
            cancelled = await http.post(f"{runs}/{run['id']}:cancel", headers=AUTH)
            assert cancelled.status_code == 200, cancelled.text
            if made % 3 == 0:
                await http.post(f"{runs}/{run['id']}:retry", headers=AUTH)
        made += 1
    return made


async def test_kill_and_reconnect_20_times_gets_every_committed_event_once(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    rng = random.Random(20261129)
    url = f"/v1/projects/{PROJECT}/events:stream"
    received: list[dict[str, Any]] = []
    ids: list[str] = []
    stop = asyncio.Event()
    writer = asyncio.create_task(churn(http, stop))
    try:
        for attempt in range(RECONNECTS):
            headers = {**AUTH, "Last-Event-ID": ids[-1]} if ids else AUTH
            async with open_stream(http, url, headers) as stream:
                # Kill the client after a few events (sometimes right after connecting).
                for _ in range(rng.randint(0, 4) if attempt else 1):
                    message = await stream.next_message()
                    ids.append(message.id)
                    received.append(message.json())
    finally:
        stop.set()
        made = await writer
    assert made >= 6

    committed = await all_project_events(http, PROJECT)
    # Drain the rest on one last connection: everything after the last id received.
    remaining = len(committed) - len(received)
    assert remaining >= 0, "received more events than were committed"
    async with open_stream(http, url, {**AUTH, "Last-Event-ID": ids[-1]}) as stream:
        for _ in range(remaining):
            message = await stream.next_message()
            ids.append(message.id)
            received.append(message.json())

    assert received == committed
    assert ids == [event["cursor"] for event in committed]
    assert len(set(ids)) == len(ids)
    assert {event["project_id"] for event in received} == {PROJECT}
    per_run: dict[str, list[int]] = {}
    for event in received:
        per_run.setdefault(event["run_id"], []).append(int(event["sequence"]))
    assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in per_run.values())


async def test_from_now_skips_the_history_and_its_first_id_resumes_without_loss(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    """A dashboard that just read its runs asks for what happens from now: no history; the
    stream's first message is a bare id (the position), so a client that drops before any
    event resumes from it and loses nothing committed in between."""
    runs = f"/v1/projects/{PROJECT}/runs"
    url = f"/v1/projects/{PROJECT}/events:stream"
    for i in range(3):
        made = await http.post(runs, json={"owner_id": "o", "task_id": f"h{i}"}, headers=AUTH)
        assert made.status_code == 201, made.text
    history = await all_project_events(http, PROJECT)
    async with open_stream(http, url, AUTH, params={"from": "now"}) as stream:
        position = await stream.next_id()
    assert position >= history[-1]["cursor"]  # cursors sort as strings: no history follows

    # Dropped before any event; a run is created meanwhile. The resume (from=now is ignored
    # next to a Last-Event-ID: a browser's reconnect repeats the URL) starts right after the
    # position, so the run's events come.
    missed = (await http.post(runs, json={"owner_id": "o", "task_id": "m"}, headers=AUTH)).json()

    def created(events: list[dict[str, Any]]) -> bool:
        return any(e["run_id"] == missed["id"] and e["type"] == "run.created" for e in events)

    feed = await project_events_until(http, PROJECT, created)
    after = [e for e in feed if e["cursor"] > position]
    assert created(after)
    headers = {**AUTH, "Last-Event-ID": position}
    async with open_stream(http, url, headers, params={"from": "now"}) as stream:
        received = [(await stream.next_message()).json() for _ in after]
    assert received == after

    # A fresh from=now connection: nothing read before it comes, a later commit does.
    before = await all_project_events(http, PROJECT)
    async with open_stream(http, url, AUTH, params={"from": "now"}) as stream:
        position = await stream.next_id()
        assert position >= before[-1]["cursor"]
        later = (await http.post(runs, json={"owner_id": "o", "task_id": "l"}, headers=AUTH)).json()
        while (message := (await stream.next_message()).json())["run_id"] != later["id"]:
            assert message["cursor"] > position  # committed after the read, never before
        assert message["type"] == "run.created" and message["cursor"] > position

    bad = await http.get(url, headers=AUTH, params={"from": "start"})
    assert bad.status_code == 400 and bad.json()["reason"] == "INVALID_ARGUMENT"


async def test_a_project_the_token_does_not_see_streams_nothing(
    http: httpx.AsyncClient,
) -> None:
    runs = "/v1/projects/proj-q/runs"
    await http.post(runs, json={"owner_id": "o", "task_id": "t"}, headers=AUTH)
    url = "/v1/projects/proj-q/events:stream"
    async with open_stream(http, url, params={"access_token": P_TOKEN}) as stream:
        await stream.wait_comment("connected")
        await http.post(runs, json={"owner_id": "o", "task_id": "t2"}, headers=AUTH)
        await stream.wait_comment("heartbeat")  # only comments arrived until now
    listed = await http.get("/v1/projects/proj-q/events", headers=bearer(P_TOKEN))
    assert listed.status_code == 200 and listed.json()["events"] == []
    seen = await http.get("/v1/projects/proj-q/events", headers=AUTH)
    assert len(seen.json()["events"]) >= 2
    bad = await http.get(url, headers={**AUTH, "Last-Event-ID": "not a cursor"})
    assert bad.status_code == 400 and bad.json()["reason"] == "INVALID_CURSOR"
