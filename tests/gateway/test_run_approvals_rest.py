"""A run's approval over REST, on SQLite and PostgreSQL: the create body's ``approval``, what
the run resource says it requires and who approved, the policy's refusals as problem+json,
and a retry that asks again (docs/state-model.md "Approvals", docs/gateway.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.gateway_stack import gateway_stack

RUNS = "/v1/projects/proj-p/runs"
#: Each person's own token: their groups are the token's.
TOKENS = (
    "carol=tok-carol:proj-p:owners=*:groups=ops;alice=tok-alice:proj-p:owners=*:groups=ops;"
    "bob=tok-bob:proj-p:owners=*:groups=ops,qa;dave=tok-dave:proj-p:owners=*:groups=dev"
)


def as_(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer tok-{name}"}


@pytest.fixture
async def http(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        gateway_stack(database_url, tokens=TOKENS) as live,
        httpx.AsyncClient(base_url=live.base_url, timeout=30.0) as client,
    ):
        yield client


def problem(response: httpx.Response, status: int, reason: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["reason"] == reason, response.text


async def approve(http: httpx.AsyncClient, run: dict[str, Any], name: str) -> httpx.Response:
    return await http.post(f"{RUNS}/{run['id']}:approve", headers=as_(name))


async def test_two_of_ops_over_rest(http: httpx.AsyncClient) -> None:
    body = {
        "owner_id": "o",
        "task_id": "deploy",
        "approval": {
            "required_approvals": 2,
            "approver_groups": ["ops"],
            "refuse_self_approval": True,
            "expire_after": "3600s",
        },
    }
    created = await http.post(RUNS, json=body, headers=as_("carol"))
    assert created.status_code == 201, created.text
    run = created.json()
    assert run["status"] == "RUN_STATUS_PENDING_APPROVAL"
    approval = run["approval"]
    assert approval["policy"] == {
        "required_approvals": 2,
        "approver_groups": ["ops"],
        "refuse_self_approval": True,
        "expire_after": "3600s",
    }
    assert approval["remaining"] == 2 and approval["grants"] == []
    assert approval["expire_time"]

    problem(await approve(http, run, "carol"), 403, "SELF_APPROVAL_REFUSED")
    problem(await approve(http, run, "dave"), 403, "APPROVER_NOT_ELIGIBLE")
    first = await approve(http, run, "alice")
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "RUN_STATUS_PENDING_APPROVAL"
    assert [g["approver"] for g in first.json()["approval"]["grants"]] == ["alice"]
    problem(await approve(http, run, "alice"), 409, "ALREADY_APPROVED")
    second = await approve(http, run, "bob")
    assert second.status_code == 200, second.text
    queued = second.json()
    assert queued["status"] == "RUN_STATUS_QUEUED"
    grants = queued["approval"]["grants"]
    assert [(g["approver"], g["groups"]) for g in grants] == [("alice", ["ops"]), ("bob", ["ops"])]
    assert all(g["grant_time"] for g in grants) and queued["approval"]["remaining"] == 0
    got = await http.get(f"{RUNS}/{run['id']}", headers=as_("dave"))
    assert got.json()["approval"] == queued["approval"]

    cancelled = await http.post(f"{RUNS}/{run['id']}:cancel", headers=as_("carol"))
    assert cancelled.status_code == 200, cancelled.text
    retried = await http.post(f"{RUNS}/{run['id']}:retry", headers=as_("carol"))
    assert retried.status_code == 201, retried.text
    retry = retried.json()
    assert retry["status"] == "RUN_STATUS_PENDING_APPROVAL"
    assert retry["approval"]["policy"] == approval["policy"]
    assert retry["approval"]["grants"] == [] and retry["approval"]["remaining"] == 2


async def test_a_bad_policy_is_400(http: httpx.AsyncClient) -> None:
    body = {"owner_id": "o", "task_id": "t", "approval": {"required_approvals": 21}}
    problem(await http.post(RUNS, json=body, headers=as_("carol")), 400, "INVALID_ARGUMENT")
