"""Tokens are scoped to projects: a token of project P gets, for every run of project Q on every
run, attempt, event and command endpoint, exactly the answer a missing run gets (no existence
leak), Q's runs never appear in P's lists, and nothing of Q changes."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.support.gateway_stack import ALL, P_TOKEN, Q_TOKEN, GatewayStack, bearer
from tests.support.snapshot import snapshot


def _run_endpoints(project: str, run_id: str) -> list[tuple[str, str]]:
    base = f"/v1/projects/{project}/runs/{run_id}"
    return [
        ("GET", base),
        ("GET", f"{base}/attempts"),
        ("GET", f"{base}/events"),
        ("GET", f"{base}/events?after_sequence=1"),
        ("GET", f"{base}/events:stream"),
        ("POST", f"{base}:cancel"),
        ("POST", f"{base}:approve"),
        ("POST", f"{base}:retry"),
        ("POST", f"{base}:resolve"),
        ("POST", f"{base}:fail"),
        ("POST", f"{base}:pause"),
        ("POST", f"{base}:resume"),
        ("POST", f"{base}:requeue"),
    ]


def _shape(response: httpx.Response, run_id: str) -> tuple[int, str, dict[str, Any]]:
    """The answer with the asked-for run id blanked: what a caller could compare."""
    body = response.json()
    body["detail"] = body["detail"].replace(run_id, "RUN")
    return response.status_code, response.headers["content-type"], body


async def test_a_token_of_p_cannot_tell_q_runs_from_missing_ones(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    q_runs = []
    for body in (
        {"owner_id": "quinn", "task_id": "q-task"},
        {"owner_id": "quinn", "task_id": "q-approval", "requires_approval": True},
    ):
        created = await http.post("/v1/projects/proj-q/runs", json=body, headers=bearer(Q_TOKEN))
        assert created.status_code == 201
        q_runs.append(created.json())
    p_run = await http.post(
        "/v1/projects/proj-p/runs",
        json={"owner_id": "pat", "task_id": "p-task"},
        headers=bearer(P_TOKEN),
    )
    assert p_run.status_code == 201
    before = await snapshot(stack.database_url)
    missing = str(uuid.uuid4())
    p = bearer(P_TOKEN)

    for q_run in q_runs:
        # Asked under Q's project (which P does not see) and under P's own project.
        for project in ("proj-q", "proj-p"):
            for method, path in _run_endpoints(project, q_run["id"]):
                leaked = await http.request(method, path, headers=p)
                absent = await http.request(method, path.replace(q_run["id"], missing), headers=p)
                assert leaked.status_code == 404, (method, path, leaked.text)
                assert _shape(leaked, q_run["id"]) == _shape(absent, missing), (method, path)
                assert leaked.json()["reason"] == "RUN_NOT_FOUND"

    listed = await http.get("/v1/projects/proj-q/runs", headers=p)
    assert listed.status_code == 200 and listed.json()["runs"] == []
    own = await http.get("/v1/projects/proj-p/runs", headers=p)
    assert [r["id"] for r in own.json()["runs"]] == [p_run.json()["id"]]
    writes = await http.post(
        "/v1/projects/proj-q/runs", json={"owner_id": "pat", "task_id": "x"}, headers=p
    )
    assert writes.status_code == 403 and writes.json()["reason"] == "PERMISSION_DENIED"
    assert await snapshot(stack.database_url) == before

    # The owners of Q (and the all-projects token) still see Q's runs.
    for token in (Q_TOKEN, ALL):
        seen = await http.get(f"/v1/projects/proj-q/runs/{q_runs[0]['id']}", headers=bearer(token))
        assert seen.status_code == 200
