"""clearRecovery's resolution over REST (docs/long-tasks.md "Resolving recovery_required"):
the body's field reaches ClearRecovery; one that is not go_on, skip or retry is a 400
problem, a known one on a task not in recovery_required the rules' 409; nothing changes."""

from __future__ import annotations

import httpx

from tests.gateway.test_long_tasks import AUTH, REPORT, _created
from tests.gateway.test_rest import assert_problem


async def test_a_resolution_is_checked_before_the_rules(http: httpx.AsyncClient) -> None:
    created = await _created(http)
    url = f"{REPORT}:clearRecovery"
    bad = {"etag": created["etag"], "resolution": "maybe"}
    assert_problem(await http.post(url, json=bad, headers=AUTH), 400, "INVALID_ARGUMENT")
    for resolution in ("go_on", "skip", "retry"):
        body = {"etag": created["etag"], "resolution": resolution}
        answer = await http.post(url, json=body, headers=AUTH)
        assert_problem(answer, 409, "INVALID_LONG_TASK_TRANSITION")  # it is planned
    after = (await http.get(REPORT, headers=AUTH)).json()
    assert (after["etag"], after["display_state"]) == (created["etag"], "planned")
