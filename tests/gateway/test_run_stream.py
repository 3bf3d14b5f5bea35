"""The per-run Server-Sent Events stream: message ids are the run's event sequences; stored
events first, then commits as they happen; resumable with Last-Event-ID (or ?last_event_id=);
the token can ride in ?access_token= (EventSource sends no headers); idle streams get
heartbeat comments."""

from __future__ import annotations

import httpx

from tests.support.gateway_stack import ALL, Q_TOKEN, bearer
from tests.support.sse_client import open_stream

AUTH = bearer(ALL)
RUNS = "/v1/projects/proj-p/runs"


async def test_run_stream_replays_follows_and_resumes(http: httpx.AsyncClient) -> None:
    created = await http.post(
        RUNS, json={"owner_id": "alice", "task_id": "t", "requires_approval": True}, headers=AUTH
    )
    run = created.json()
    path = f"{RUNS}/{run['id']}"
    stored = (await http.get(f"{path}/events", headers=AUTH)).json()["events"]
    assert stored

    async with open_stream(http, f"{path}/events:stream", headers=AUTH) as stream:
        replayed = [await stream.next_message() for _ in stored]
        assert [m.id for m in replayed] == [e["sequence"] for e in stored]
        assert {m.event for m in replayed} == {"run_event"}
        assert [m.json() for m in replayed] == stored
        approved = await http.post(f"{path}:approve", headers=AUTH)
        assert approved.status_code == 200
        live = await stream.next_message()
        assert int(live.id) == len(stored) + 1 and live.json()["run_id"] == run["id"]
        assert live.json()["sequence"] == live.id

    await http.post(f"{path}:cancel", json={"reason": "done"}, headers=AUTH)
    everything = (await http.get(f"{path}/events", headers=AUTH)).json()["events"]
    resumed_from = str(len(stored))
    expected = [e for e in everything if int(e["sequence"]) > len(stored)]
    for headers, params in (
        ({**AUTH, "Last-Event-ID": resumed_from}, None),
        (None, {"last_event_id": resumed_from, "access_token": ALL}),
        # The header is the browser's reconnect: it wins over the URL's first position.
        ({**AUTH, "Last-Event-ID": resumed_from}, {"last_event_id": "0"}),
    ):
        async with open_stream(http, f"{path}/events:stream", headers, params) as stream:
            got = [(await stream.next_message()).json() for _ in expected]
            assert got == expected


async def test_run_stream_refusals(http: httpx.AsyncClient) -> None:
    run = (await http.post(RUNS, json={"owner_id": "a", "task_id": "t"}, headers=AUTH)).json()
    url = f"{RUNS}/{run['id']}/events:stream"
    for headers, params, status in (
        (None, None, 401),
        (None, {"access_token": "wrong"}, 401),
        (bearer(Q_TOKEN), None, 404),
        (None, {"access_token": Q_TOKEN}, 404),
        ({**AUTH, "Last-Event-ID": "seven"}, None, 400),
        ({**AUTH, "Last-Event-ID": "-1"}, None, 400),
    ):
        response = await http.get(url, headers=headers, params=params)
        assert response.status_code == status, (headers, params, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
    # A token in the query string is for streams only.
    plain = await http.get(f"{RUNS}/{run['id']}", params={"access_token": ALL})
    assert plain.status_code == 401


async def test_an_idle_stream_gets_heartbeats(http: httpx.AsyncClient) -> None:
    run = (await http.post(RUNS, json={"owner_id": "a", "task_id": "t"}, headers=AUTH)).json()
    last = str(run["event_sequence"])
    async with open_stream(
        http, f"{RUNS}/{run['id']}/events:stream", {**AUTH, "Last-Event-ID": last}
    ) as stream:
        await stream.wait_comment("connected")
        await stream.wait_comment("heartbeat")
