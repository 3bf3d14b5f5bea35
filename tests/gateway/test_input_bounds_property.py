"""Issue #37's property, by Hypothesis over one live stack per database (SQLite, PostgreSQL):
whatever JSON a door accepts (a signed webhook delivery, CreateRun over REST) reads back
through every reader (gRPC GetRun, ListRuns with and without a project, REST /runs and
/runs/{id}) without an error and without a note; whatever passes a bound is refused
(400/413 problem+json) with nothing written. Examples run in a worker thread, each driven
on the test's event loop, where the stack serves (few per store: the suite's time budget)."""

from __future__ import annotations

import asyncio
import json
from itertools import count
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from truerun.v1 import run_service_pb2

from kernel import json_bounds
from tests.gateway.test_input_bounds import RUNS, deliver
from tests.gateway.test_schedules import create as create_schedule
from tests.support.gateway_stack import ALL, GatewayStack, bearer

AUTH = bearer(ALL)
SMALL = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text("abc xyz", max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text("abcdef", max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
# past a bound, or close to one: wide arrays, long strings, deep nesting
LEAVES = SMALL | st.sampled_from([list(range(1000)), list(range(1001)), "q" * 16_385])


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    value: Any = draw(LEAVES)
    for _ in range(draw(st.integers(0, 40))):
        value = {draw(st.sampled_from("ab")): value}
    return {"v": value}


async def _run_ids(stack: GatewayStack) -> set[str]:
    listed = await stack.runs.ListRuns(run_service_pb2.ListRunsRequest(page_size=1000))
    return {run.id for run in listed.runs}


async def _reads_back(http: httpx.AsyncClient, stack: GatewayStack, run_id: str) -> None:
    got = await stack.runs.GetRun(run_service_pb2.GetRunRequest(id=run_id))
    assert json_bounds.NOTE_KEY not in got.spec.fields
    assert run_id in await _run_ids(stack)
    in_project = run_service_pb2.ListRunsRequest(project_id="proj-p", page_size=1000)
    assert run_id in {r.id for r in (await stack.runs.ListRuns(in_project)).runs}
    one = await http.get(f"{RUNS}/{run_id}", headers=AUTH)
    assert one.status_code == 200 and json_bounds.NOTE_KEY not in one.json()["spec"], one.text
    page = await http.get(RUNS, headers=AUTH, params={"page_size": 1000})
    assert page.status_code == 200 and run_id in {r["id"] for r in page.json()["runs"]}


async def test_what_a_door_accepts_reads_back_and_what_passes_a_bound_is_refused(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    loop = asyncio.get_running_loop()
    secret = (await create_schedule(http, webhook_enabled=True))["webhook_secret"]
    deliveries = count()
    seen = {"accepted": 0, "refused": 0}

    async def example(door: str, payload: dict[str, Any]) -> None:
        before = await _run_ids(stack)
        if door == "webhook":
            violation = json_bounds.first_violation(payload)
            body = json.dumps(payload).encode()
            answer = await deliver(http, secret, f"p-{next(deliveries)}", body)
        else:
            spec = {"command": "true", **payload}
            violation = json_bounds.first_violation(spec)
            body = json.dumps({"owner_id": "alice", "task_id": "t", "spec": spec}).encode()
            answer = await http.post(RUNS, content=body, headers=AUTH)
        if violation is None:
            assert answer.status_code in (200, 201), answer.text
            made = answer.json()
            run_id = made["runs"][0]["run_id"] if door == "webhook" else made["id"]
            await _reads_back(http, stack, run_id)
            seen["accepted"] += 1
        else:
            assert answer.status_code in (400, 413), answer.text
            assert answer.headers["content-type"].startswith("application/problem+json")
            assert answer.json()["reason"] in ("INPUT_OUT_OF_BOUNDS", "INPUT_TOO_LARGE")
            assert await _run_ids(stack) == before  # nothing written
            seen["refused"] += 1

    @settings(
        max_examples=14,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(["webhook", "create"]), payloads())
    def accepted_reads_back(door: str, payload: dict[str, Any]) -> None:
        asyncio.run_coroutine_threadsafe(example(door, payload), loop).result(60)

    await asyncio.to_thread(accepted_reads_back)
    assert seen["accepted"] and seen["refused"], seen  # both sides of the bound were tried
