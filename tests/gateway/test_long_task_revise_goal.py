"""revisePlan over REST with a new goal and new constraints (the dashboard's inspector saves
them so), on SQLite and PostgreSQL: a new plan version with the reason and the caller as
author, the task's goal and constraints from then on; constraints are kept unless
revise_constraints is set; a stale etag changes nothing."""

from __future__ import annotations

import httpx

from tests.gateway.test_long_tasks import AUTH, REPORT, _command, _created
from tests.gateway.test_rest import assert_problem


async def test_revise_the_goal_and_the_constraints(http: httpx.AsyncClient) -> None:
    created = await _created(http)
    body = {"etag": created["etag"], "reason": "a sharper goal", "goal": "Publish it by noon"}
    revised = await _command(http, "revisePlan", body)
    assert revised["goal"] == "Publish it by noon" and revised["plan_version"] == 2
    assert revised["constraints"] == ["never email customers"]  # kept: not asked to change
    last = revised["plan_versions"][-1]
    assert (last["version"], last["reason"], last["author"]) == (2, "a sharper goal", "user")
    assert [s["step_id"] for s in revised["steps"]] == ["build", "upload"]  # steps kept
    again = {
        "etag": revised["etag"],
        "reason": "new limits",
        "constraints": ["only the EU bucket", "no weekend runs"],
        "revise_constraints": True,
    }
    limited = await _command(http, "revisePlan", again)
    assert limited["constraints"] == ["only the EU bucket", "no weekend runs"]
    assert limited["goal"] == "Publish it by noon" and limited["plan_version"] == 3
    cleared = await _command(
        http, "revisePlan", {"etag": limited["etag"], "reason": "none", "revise_constraints": True}
    )
    assert cleared["constraints"] == []
    stale = {"etag": created["etag"], "reason": "late", "goal": "something else"}
    assert_problem(
        await http.post(f"{REPORT}:revisePlan", json=stale, headers=AUTH),
        409,
        "LONG_TASK_VERSION_CONFLICT",
    )
    assert (await http.get(REPORT, headers=AUTH)).json()["goal"] == "Publish it by noon"
