"""GET /v1/me: who the calling token is, derived from the credential alone (the dashboard
says "answered by you" with it): the actor its actions carry, its projects, operator or not;
no token or a wrong one is a 401 problem."""

from __future__ import annotations

import httpx

from tests.gateway.test_rest import assert_problem
from tests.support.gateway_stack import ALL, P_TOKEN, bearer


async def test_me_names_the_callers_actor_and_projects(http: httpx.AsyncClient) -> None:
    everything = await http.get("/v1/me", headers=bearer(ALL))
    assert everything.status_code == 200, everything.text
    assert everything.json() == {
        "actor": everything.json()["actor"],
        "named": False,
        "all_projects": True,
        "projects": [],
        "operator": True,
    }
    assert everything.json()["actor"].startswith("token-")  # no name configured: its hash
    scoped = (await http.get("/v1/me", headers=bearer(P_TOKEN))).json()
    assert (scoped["all_projects"], scoped["projects"], scoped["operator"]) == (
        False,
        ["proj-p"],
        False,
    )
    assert scoped["actor"] != everything.json()["actor"]
    # the actor is the one its actions are recorded as
    created = await http.post(
        "/v1/projects/proj-p/runs",
        json={"owner_id": "ana", "task_id": "t"},
        headers=bearer(P_TOKEN),
    )
    assert created.status_code == 201, created.text
    assert created.json()["created_by"] == scoped["actor"], created.json()


async def test_me_needs_a_valid_token(http: httpx.AsyncClient) -> None:
    assert_problem(await http.get("/v1/me"), 401, "UNAUTHENTICATED")
    assert_problem(await http.get("/v1/me", headers=bearer("nope")), 401, "UNAUTHENTICATED")
