"""The gateway's REST resources against a live stack (gRPC services + gateway on loopback), on
SQLite and PostgreSQL: create idempotency, ETag/If-Match, problem+json errors, size limit,
attempts, filters, capacity and agents. Every refused request is shown to change nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
from truerun.v1 import capacity_service_pb2

from gateway.openapi import render
from tests.support.capacity import observe
from tests.support.gateway_stack import ALL, GatewayStack, bearer
from tests.support.snapshot import snapshot

AUTH = bearer(ALL)
RUNS = "/v1/projects/proj-p/runs"


def assert_problem(response: httpx.Response, status: int, reason: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["reason"] == reason, body
    assert {"type", "title", "detail"} <= set(body)
    return body


async def create(http: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"owner_id": "alice", "task_id": "build", **fields}
    response = await http.post(RUNS, json=body, headers=AUTH)
    assert response.status_code == 201, response.text
    run: dict[str, Any] = response.json()
    return run


async def test_create_with_idempotency_key_is_201_then_200_with_the_same_run(
    http: httpx.AsyncClient,
) -> None:
    headers = {**AUTH, "Idempotency-Key": "nightly-2026-11-29"}
    body = {"owner_id": "alice", "task_id": "build", "spec": {"command": "make"}}

    first = await http.post(RUNS, json=body, headers=headers)
    again = await http.post(RUNS, json=body, headers=headers)

    assert first.status_code == 201 and again.status_code == 200
    run = first.json()
    assert again.json()["id"] == run["id"]
    assert run["project_id"] == "proj-p" and run["idempotency_key"] == "nightly-2026-11-29"
    assert run["display_state"] == "DISPLAY_STATE_QUEUED" and run["spec"] == {"command": "make"}
    assert run["display_since_time"] == run["update_time"]  # queued since it was created
    assert run["created_by"]  # the token's actor, never the body's
    assert first.headers["location"] == f"{RUNS}/{run['id']}"
    assert first.headers["etag"] == run["etag"]
    got = await http.get(first.headers["location"], headers=AUTH)
    assert got.status_code == 200 and got.headers["etag"] == run["etag"]
    # Only reads compute the queue position; everything else is the created run.
    assert got.json() == {**run, "queue_position": "1"}
    listed = (await http.get(RUNS, headers=AUTH)).json()
    assert [r["id"] for r in listed["runs"]] == [run["id"]]


async def test_if_match_stale_is_409_and_changes_nothing(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    run = await create(http, requires_approval=True)
    path = f"{RUNS}/{run['id']}"
    approved = await http.post(f"{path}:approve", headers={**AUTH, "If-Match": run["etag"]})
    assert approved.status_code == 200, approved.text
    assert approved.json()["display_state"] == "DISPLAY_STATE_QUEUED"
    assert approved.headers["etag"] == approved.json()["etag"] != run["etag"]
    before = await snapshot(stack.database_url)

    stale = await http.post(
        f"{path}:cancel", json={"reason": "late"}, headers={**AUTH, "If-Match": run["etag"]}
    )

    assert_problem(stale, 409, "RUN_VERSION_CONFLICT")
    assert await snapshot(stack.database_url) == before
    fresh = await http.post(
        f"{path}:cancel",
        json={"reason": "not needed"},
        headers={**AUTH, "If-Match": approved.headers["etag"]},
    )
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["outcome"] == "CANCEL_OUTCOME_CANCELLED"
    assert fresh.json()["run"]["cancel_reason"] == "not needed"


async def test_invalid_transitions_are_409_and_change_nothing(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    run = await create(http)
    path = f"{RUNS}/{run['id']}"
    before = await snapshot(stack.database_url)

    assert_problem(await http.post(f"{path}:approve", headers=AUTH), 409, "INVALID_RUN_TRANSITION")
    assert_problem(await http.post(f"{path}:retry", headers=AUTH), 409, "INVALID_RUN_TRANSITION")

    assert await snapshot(stack.database_url) == before
    cancelled = await http.post(f"{path}:cancel", headers=AUTH)
    assert cancelled.status_code == 200
    stale_retry = await http.post(f"{path}:retry", headers={**AUTH, "If-Match": run["etag"]})
    assert_problem(stale_retry, 409, "RUN_VERSION_CONFLICT")
    retried = await http.post(
        f"{path}:retry", headers={**AUTH, "If-Match": cancelled.json()["run"]["etag"]}
    )
    assert retried.status_code == 201, retried.text
    new = retried.json()
    assert new["retry_of_run_id"] == run["id"] and new["id"] != run["id"]
    assert retried.headers["location"] == f"{RUNS}/{new['id']}"
    old = (await http.get(path, headers=AUTH)).json()
    assert old["display_state"] == "DISPLAY_STATE_CANCELLED"


async def test_bad_requests_are_problems_and_change_nothing(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    run = await create(http)
    before = await snapshot(stack.database_url)
    huge = json.dumps({"owner_id": "alice", "task_id": "t", "spec": {"x": "y" * 300_000}})

    assert_problem(
        await http.post(RUNS, content=huge, headers={**AUTH, "Content-Type": "application/json"}),
        413,
        "REQUEST_TOO_LARGE",
    )

    async def chunks() -> Any:
        for _ in range(40):  # no Content-Length: the limit holds while reading
            yield b" " * 10_000

    assert_problem(await http.post(RUNS, content=chunks(), headers=AUTH), 413, "REQUEST_TOO_LARGE")
    assert_problem(
        await http.post(RUNS, content=b"{not json", headers=AUTH), 400, "INVALID_ARGUMENT"
    )
    assert_problem(await http.post(RUNS, json=[1, 2], headers=AUTH), 400, "INVALID_ARGUMENT")
    assert_problem(
        await http.post(RUNS, json={"owner_id": "a", "task_id": "t", "nope": 1}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    assert_problem(
        await http.post(RUNS, json={"owner_id": "a", "task_id": "t", "actor": {}}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    assert_problem(
        await http.post(RUNS, json={"task_id": "t"}, headers=AUTH), 400, "INVALID_ARGUMENT"
    )
    assert_problem(
        await http.get(RUNS, params={"page_size": "many"}, headers=AUTH), 400, "INVALID_ARGUMENT"
    )
    assert_problem(
        await http.get(RUNS, params={"status": "sleeping"}, headers=AUTH), 400, "INVALID_ARGUMENT"
    )
    assert_problem(await http.get(f"{RUNS}/not-a-uuid", headers=AUTH), 400, "INVALID_ARGUMENT")
    assert_problem(await http.post(f"{RUNS}/{run['id']}:explode", headers=AUTH), 404, "NOT_FOUND")
    assert_problem(
        await http.post(f"{RUNS}/{run['id']}:cancel", json={"reason": 5}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    assert_problem(
        await http.delete(f"{RUNS}/{run['id']}", headers=AUTH), 405, "METHOD_NOT_ALLOWED"
    )
    for headers in ({}, bearer("wrong"), {"Authorization": f"Basic {ALL}"}):
        missing = await http.get(RUNS, headers=headers)
        assert_problem(missing, 401, "UNAUTHENTICATED")
        assert missing.headers["www-authenticate"] == "Bearer"
        assert_problem(
            await http.post(RUNS, json={"owner_id": "a", "task_id": "t"}, headers=headers),
            401,
            "UNAUTHENTICATED",
        )

    assert await snapshot(stack.database_url) == before


async def test_attempts_filters_capacity_and_agents(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    queued = await create(http, agent_id="agent-1")
    pending = await create(http, requires_approval=True)

    attempts = await http.get(f"{RUNS}/{queued['id']}/attempts", headers=AUTH)
    assert attempts.status_code == 200
    (attempt,) = attempts.json()["attempts"]
    assert attempt["id"] == queued["current_attempt_id"]
    assert (attempt["status"], attempt["observed_state"], attempt["sync_state"]) == (
        "ATTEMPT_STATUS_QUEUED",
        "OBSERVED_STATE_UNCONFIRMED",
        "SYNC_STATE_PENDING",
    )
    by_status = await http.get(RUNS, params={"status": "pending_approval"}, headers=AUTH)
    assert [r["id"] for r in by_status.json()["runs"]] == [pending["id"]]
    by_display = await http.get(
        RUNS,
        params=[("display_state", "DISPLAY_STATE_QUEUED"), ("agent_id", "agent-1")],
        headers=AUTH,
    )
    assert [r["id"] for r in by_display.json()["runs"]] == [queued["id"]]
    paged = await http.get(RUNS, params={"page_size": 1}, headers=AUTH)
    assert len(paged.json()["runs"]) == 1 and paged.json()["next_page_token"]
    events = await http.get(f"{RUNS}/{queued['id']}/events", headers=AUTH)
    listed = events.json()["events"]
    assert [e["sequence"] for e in listed] == [str(n) for n in range(1, len(listed) + 1)]
    assert listed and {e["run_id"] for e in listed} == {queued["id"]}
    after = await http.get(
        f"{RUNS}/{queued['id']}/events", params={"after_sequence": 1}, headers=AUTH
    )
    assert after.json()["events"] == listed[1:]

    await observe(stack.capacity.reports, "alice", "laptop-1", 3, ["task-a"])
    occupancy = await http.get("/v1/capacity/owners/alice/instances/laptop-1", headers=AUTH)
    assert occupancy.status_code == 200, occupancy.text
    body = occupancy.json()
    assert (body["limit"], body["occupied"], body["runtime_active"], body["free_slots"]) == (
        3,
        1,
        1,
        2,
    )
    assert body["merged_task_ids"] == ["task-a"] and body["observation_fresh"] is True
    assert body["observation_age"].endswith("s")

    await stack.capacity_stub.ConfigureAgent(
        capacity_service_pb2.ConfigureAgentRequest(
            agent=capacity_service_pb2.Agent(agent_id="agent-1", concurrency=1)
        )
    )
    agent = await http.get("/v1/agents/agent-1", headers=AUTH)
    assert agent.status_code == 200 and agent.json()["concurrency"] == 1
    assert agent.json()["live_attempts"] == 0
    assert_problem(await http.get("/v1/agents/nobody", headers=AUTH), 404, "AGENT_NOT_FOUND")
    assert_problem(await http.get("/v1/agents/agent-1"), 401, "UNAUTHENTICATED")


async def test_openapi_is_served_checked_in_and_generated(http: httpx.AsyncClient) -> None:
    from gateway.app import OPENAPI_PATH

    served = await http.get("/v1/openapi.json")
    assert served.status_code == 200
    assert served.content == OPENAPI_PATH.read_bytes()
    assert OPENAPI_PATH.read_text() == render(), (
        "gateway/openapi.json is stale: python -m gateway.openapi > gateway/openapi.json"
    )
    health = await http.get("/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
