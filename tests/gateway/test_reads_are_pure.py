"""Reads through the gateway never write: 200 GETs spread over every GET endpoint, plus SSE
connects and reconnects, leave every row of every table (and so every version) as it was."""

from __future__ import annotations

import itertools
import uuid

import httpx

from tests.support.capacity import observe
from tests.support.gateway_stack import ALL, P_TOKEN, GatewayStack, bearer
from tests.support.snapshot import snapshot
from tests.support.sse_client import open_stream

AUTH = bearer(ALL)
READS = 200


async def test_gets_and_stream_reconnects_change_no_row(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    runs = "/v1/projects/proj-p/runs"
    ids = []
    for fields in (
        {"agent_id": "agent-1"},
        {"requires_approval": True},
        {"idempotency_key": "k"},
    ):
        body = {"owner_id": "alice", "task_id": "t", **fields}
        ids.append((await http.post(runs, json=body, headers=AUTH)).json()["id"])
    await http.post(f"{runs}/{ids[2]}:cancel", headers=AUTH)
    retried = await http.post(f"{runs}/{ids[2]}:retry", headers=AUTH)
    ids.append(retried.json()["id"])
    await http.post(
        "/v1/projects/proj-q/runs", json={"owner_id": "q", "task_id": "t"}, headers=AUTH
    )
    await observe(stack.capacity.reports, "alice", "laptop-1", 2)
    shown = {i: (await http.get(f"{runs}/{i}", headers=AUTH)).json() for i in ids}
    versions = {i: run["version"] for i, run in shown.items()}
    sequences = {i: run["event_sequence"] for i, run in shown.items()}

    gets = [
        *(f"{runs}/{i}" for i in ids),
        *(f"{runs}/{i}/attempts" for i in ids),
        *(f"{runs}/{i}/events" for i in ids),
        f"{runs}/{ids[0]}/events?after_sequence=1&page_size=1",
        runs,
        f"{runs}?status=queued&page_size=1",
        f"{runs}?display_state=DISPLAY_STATE_CANCELLED",
        f"{runs}?owner_id=alice&agent_id=agent-1",
        f"{runs}?task_id=t&text=al&create_time_from=2020-01-01T00:00:00Z",
        f"{runs}:count",
        f"{runs}:count?owner_id=alice&text=a",
        f"{runs}/{uuid.uuid4()}",  # a 404 reads too
        "/v1/projects/proj-q/runs",
        "/v1/projects/proj-p/events",
        "/v1/projects/proj-p/events?page_size=2",
        "/v1/projects/proj-q/events",
        "/v1/capacity/owners/alice/instances/laptop-1",
        "/v1/capacity/owners/alice/instances/unknown",
        "/v1/agents/agent-1",
        "/v1/agents",
        "/v1/runtimes",
        "/v1/runtimes?owner_id=alice",
        "/v1/openapi.json",
        "/healthz",
    ]
    before = await snapshot(stack.database_url)

    for n, path in zip(range(READS), itertools.cycle(gets), strict=False):
        token = P_TOKEN if n % 7 == 0 else ALL
        response = await http.get(path, headers=bearer(token))
        assert response.status_code < 500, (path, response.text)
    for n, run_id in zip(range(20), itertools.cycle(ids), strict=False):
        url = f"{runs}/{run_id}/events:stream"
        if n % 2:  # a reconnect that is already up to date: nothing to replay
            resume = {"Last-Event-ID": str(sequences[run_id])}
            async with open_stream(http, url, {**AUTH, **resume}) as stream:
                await stream.wait_comment("connected")
        else:
            async with open_stream(http, url, AUTH) as stream:
                await stream.next_message()

    project_stream = "/v1/projects/proj-p/events:stream"
    cursors = [
        e["cursor"]
        for e in (await http.get("/v1/projects/proj-p/events", headers=AUTH)).json()["events"]
    ]
    for n in range(10):
        resume = {"Last-Event-ID": cursors[n % len(cursors)]} if n % 2 else {}
        async with open_stream(http, project_stream, {**AUTH, **resume}) as stream:
            if n % 2 and n % len(cursors) == len(cursors) - 1:
                await stream.wait_comment("connected")
            else:
                await stream.next_message()

    assert await snapshot(stack.database_url) == before
    for run_id, version in versions.items():
        assert (await http.get(f"{runs}/{run_id}", headers=AUTH)).json()["version"] == version
