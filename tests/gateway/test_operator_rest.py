"""Operator commands over REST (``:resolve``, ``:fail``, ``:pause``, ``:resume``,
``:requeue``) against a live stack: each needs a reason (400 without one, nothing changes),
records the token's identity as the actor, honours If-Match (409 RUN_VERSION_CONFLICT), and
answers 409 INVALID_RUN_TRANSITION when the run is not in a state the command applies to."""

from __future__ import annotations

from typing import Any

import httpx

from tests.gateway.test_rest import AUTH, RUNS, assert_problem, create
from tests.support.gateway_stack import GatewayStack
from tests.support.snapshot import snapshot


async def test_pause_resume_fail_with_reason_etag_and_actor(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    run = await create(http)
    path = f"{RUNS}/{run['id']}"

    before = await snapshot(stack.database_url)
    assert_problem(await http.post(f"{path}:pause", headers=AUTH), 400, "INVALID_ARGUMENT")
    assert_problem(
        await http.post(f"{path}:pause", json={"reason": "  "}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    assert_problem(
        await http.post(f"{path}:pause", json={"reason": "x", "actor": "me"}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    assert await snapshot(stack.database_url) == before

    paused = await http.post(
        f"{path}:pause",
        json={"reason": "maintenance window"},
        headers={**AUTH, "If-Match": run["etag"]},
    )
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "RUN_STATUS_PAUSED"
    assert paused.headers["etag"] == paused.json()["etag"] != run["etag"]

    before = await snapshot(stack.database_url)
    assert_problem(
        await http.post(
            f"{path}:resume", json={"reason": "x"}, headers={**AUTH, "If-Match": run["etag"]}
        ),
        409,
        "RUN_VERSION_CONFLICT",
    )
    for verb in ("pause", "requeue"):
        assert_problem(
            await http.post(f"{path}:{verb}", json={"reason": "again"}, headers=AUTH),
            409,
            "INVALID_RUN_TRANSITION",
        )
    assert await snapshot(stack.database_url) == before

    resumed = await http.post(f"{path}:resume", json={"reason": "window over"}, headers=AUTH)
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "RUN_STATUS_QUEUED"

    failed = await http.post(
        f"{path}:fail",
        json={"reason": "never needed", "request_id": "fail-1"},
        headers={**AUTH, "If-Match": resumed.headers["etag"]},
    )
    assert failed.status_code == 200, failed.text
    assert failed.json()["status"] == "RUN_STATUS_FAILED"

    events = (await http.get(f"{path}/events", headers=AUTH)).json()["events"]
    audited: list[dict[str, Any]] = [
        e for e in events if e.get("actor", {}).get("type") == "ACTOR_TYPE_OPERATOR"
    ]
    assert len(audited) >= 3, events  # a command may write several events
    # The actor is the token's identity (a non-secret digest name), never a body field.
    assert len({e["actor"]["id"] for e in audited}) == 1
    assert audited[0]["actor"]["id"].startswith("token-")
    assert "token-all-projects" not in str(events)


async def test_resolve_validates_resolution_and_attempt_and_refuses_a_queued_run(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    run = await create(http)
    path = f"{RUNS}/{run['id']}"
    before = await snapshot(stack.database_url)
    assert_problem(
        await http.post(f"{path}:resolve", json={"resolution": "failed"}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    assert_problem(
        await http.post(f"{path}:resolve", json={"reason": "r", "resolution": "x"}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    assert_problem(
        await http.post(
            f"{path}:resolve",
            json={"reason": "r", "resolution": "failed", "attempt_id": "att-other"},
            headers=AUTH,
        ),
        409,
        "ATTEMPT_MISMATCH",
    )
    assert_problem(
        await http.post(
            f"{path}:resolve", json={"reason": "checked", "resolution": "succeeded"}, headers=AUTH
        ),
        409,
        "INVALID_RUN_TRANSITION",
    )
    assert await snapshot(stack.database_url) == before
