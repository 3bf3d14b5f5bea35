"""The runs list's filters and counts over REST, on both backends: task, owner, agent, time
range and free text narrow ``GET .../runs``; ``GET .../runs:count`` counts the same filter's
runs per display state (the display state is the server's); bad values are 400s."""

from __future__ import annotations

from typing import Any

import httpx

from tests.gateway.test_rest import AUTH, RUNS, assert_problem, create


async def _ids(http: httpx.AsyncClient, **query: Any) -> set[str]:
    response = await http.get(RUNS, params=query, headers=AUTH)
    assert response.status_code == 200, response.text
    return {run["id"] for run in response.json()["runs"]}


async def _counts(http: httpx.AsyncClient, **query: Any) -> dict[str, Any]:
    response = await http.get(f"{RUNS}:count", params=query, headers=AUTH)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["complete"] is True
    return {c["display_state"]: int(c["count"]) for c in body["counts"]} | {
        "total": int(body["total"])
    }


async def test_filters_and_counts_agree(http: httpx.AsyncClient) -> None:
    a1 = await create(http, owner_id="alice", task_id="build-web")
    a2 = await create(http, owner_id="alice", task_id="deploy", agent_id="agent-x")
    b1 = await create(http, owner_id="bob", task_id="build-web")
    b2 = await create(http, owner_id="bob", task_id="nightly-report")
    paused = await http.post(f"{RUNS}/{a2['id']}:pause", json={"reason": "hold"}, headers=AUTH)
    assert paused.status_code == 200, paused.text
    failed = await http.post(f"{RUNS}/{b2['id']}:fail", json={"reason": "no"}, headers=AUTH)
    assert failed.status_code == 200, failed.text

    assert await _ids(http, owner_id="alice") == {a1["id"], a2["id"]}
    assert await _ids(http, task_id="build-web") == {a1["id"], b1["id"]}
    assert await _ids(http, agent_id="agent-x") == {a2["id"]}
    # Free text: any identifying column, case-insensitively, literally (no wildcards).
    assert await _ids(http, text="BUILD") == {a1["id"], b1["id"]}
    assert await _ids(http, text="report") == {b2["id"]}
    assert await _ids(http, text=b1["id"][-12:]) == {b1["id"]}
    assert await _ids(http, text="%") == set()
    # Time range: from is inclusive, to exclusive.
    assert await _ids(http, create_time_from=b1["create_time"]) == {b1["id"], b2["id"]}
    assert await _ids(http, create_time_to=b1["create_time"]) == {a1["id"], a2["id"]}
    assert await _ids(http, owner_id="bob", display_state="failed") == {b2["id"]}

    assert await _counts(http) == {
        "DISPLAY_STATE_QUEUED": 2,
        "DISPLAY_STATE_PAUSED": 1,
        "DISPLAY_STATE_FAILED": 1,
        "total": 4,
    }
    assert await _counts(http, owner_id="bob") == {
        "DISPLAY_STATE_QUEUED": 1,
        "DISPLAY_STATE_FAILED": 1,
        "total": 2,
    }
    assert await _counts(http, text="build", owner_id="alice") == {
        "DISPLAY_STATE_QUEUED": 1,
        "total": 1,
    }
    assert await _counts(http, owner_id="nobody") == {"total": 0}
    # A project the token does not see counts nothing, like its list is empty.
    hidden = await http.get("/v1/projects/proj-z/runs:count", headers=AUTH)
    assert hidden.status_code == 200 and int(hidden.json()["total"]) == 0

    for bad in (
        {"create_time_from": "yesterday"},
        {"create_time_to": "2026-01-02T03:04:05"},  # no zone
        {"create_time_from": b1["create_time"], "create_time_to": a1["create_time"]},
        {"text": "x" * 300},
        {"text": "a\x00b"},  # no NUL (PostgreSQL text cannot hold one), no control characters
        {"task_id": "t\nx"},
        {"status": "sleeping"},
    ):
        assert_problem(
            await http.get(f"{RUNS}:count", params=bad, headers=AUTH), 400, "INVALID_ARGUMENT"
        )
        assert_problem(await http.get(RUNS, params=bad, headers=AUTH), 400, "INVALID_ARGUMENT")
