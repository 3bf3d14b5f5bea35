"""Issue #37 "No input can poison a project", over a live stack (gRPC services + gateway on
loopback), on SQLite and PostgreSQL, written from the findings' repros:

- a signed webhook delivery nested 60 deep (193 bytes) is refused 400 INPUT_OUT_OF_BOUNDS and
  writes nothing; GetRun, ListRuns (with and without a project), REST ``/runs`` and
  ``truerun ls`` still answer;
- a body nested 5,000 deep (30 KiB, under the body limit) is a 400 problem, not a 502;
- a run row written before the bounds existed (inserted straight into the table), nested too
  deep for any reader, is shown with a note and never fails GetRun, ListRuns, CancelRun, REST
  or the CLI;
- CreateRun and CreateLongTask past a bound are refused naming the limit, nothing written.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import long_task_service_pb2_grpc, run_service_pb2

from automations.domain.webhooks import sign
from kernel.ids import now_ms
from services.cli.main import main
from tests.gateway.test_rest import assert_problem
from tests.gateway.test_schedules import create as create_schedule
from tests.integration.test_run_service_grpc import error_info
from tests.support.auth import aio_channel
from tests.support.gateway_stack import ALL, GatewayStack, bearer
from tests.support.snapshot import snapshot

AUTH = bearer(ALL)
RUNS = "/v1/projects/proj-p/runs"
NIGHTLY = "/v1/projects/proj-p/schedules/nightly"
NESTED_32 = b'{"a":' * 32 + b"1" + b"}" * 32  # the finding's 193 bytes
NESTED_60 = b'{"a":' * 60 + b"1" + b"}" * 60  # its repro's body
NESTED_5000 = b'{"a":' * 5000 + b"1" + b"}" * 5000  # 30 KiB: under the 64 KiB body limit


def nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


async def deliver(
    http: httpx.AsyncClient, secret: str, delivery: str, body: bytes
) -> httpx.Response:
    return await http.post(
        f"{NIGHTLY}:deliver",
        content=body,
        headers={
            "X-Truerun-Delivery": delivery,
            "X-Truerun-Signature": sign(secret, now_ms(), delivery, body),
            "Content-Type": "application/json",
        },
    )


async def every_reader_answers(
    http: httpx.AsyncClient, stack: GatewayStack, run_ids: list[str]
) -> list[dict[str, Any]]:
    """GetRun and ListRuns (project and all projects) over gRPC, REST /runs and /runs/{id},
    and `truerun ls`: each answers, every run listed. The REST runs, as shown."""
    listed = await stack.runs.ListRuns(run_service_pb2.ListRunsRequest(project_id="proj-p"))
    assert {r.id for r in listed.runs} >= set(run_ids)
    everywhere = await stack.runs.ListRuns(run_service_pb2.ListRunsRequest())
    assert {r.id for r in everywhere.runs} >= set(run_ids)
    for run_id in run_ids:
        assert (await stack.runs.GetRun(run_service_pb2.GetRunRequest(id=run_id))).id == run_id
    page = await http.get(RUNS, headers=AUTH)
    assert page.status_code == 200, page.text
    assert {r["id"] for r in page.json()["runs"]} >= set(run_ids)
    shown = []
    for run_id in run_ids:
        one = await http.get(f"{RUNS}/{run_id}", headers=AUTH)
        assert one.status_code == 200, one.text
        shown.append(one.json())
    argv = ["ls", "--server", stack.grpc_address, "--token", ALL, "--project", "proj-p"]
    assert await asyncio.to_thread(main, argv) == 0
    return shown


async def test_a_webhook_nested_60_deep_is_refused_and_every_reader_still_answers(
    http: httpx.AsyncClient, stack: GatewayStack, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = (await create_schedule(http, webhook_enabled=True))["webhook_secret"]
    first = await deliver(http, secret, "d-1", b'{"ref": "main"}')
    assert first.status_code == 200, first.text
    (fired,) = first.json()["runs"]
    before = await snapshot(stack.database_url)

    assert len(NESTED_32) == 193
    for delivery, body, depth in (("d-2", NESTED_32, "32"), ("d-3", NESTED_60, "60")):
        refused = assert_problem(
            await deliver(http, secret, delivery, body), 400, "INPUT_OUT_OF_BOUNDS"
        )
        assert refused["limit"] == "depth" and refused["setting"] == "TRUERUN_INPUT_MAX_DEPTH"
        assert refused["allowed"] == "16" and refused["found"] == depth
    assert await snapshot(stack.database_url) == before  # nothing written

    await every_reader_answers(http, stack, [fired["run_id"]])
    out = capsys.readouterr().out
    assert fired["run_id"] in out

    # a delivery within the bounds still makes its run
    again = await deliver(http, secret, "d-4", json.dumps({"x": nested(10)}).encode())
    assert again.status_code == 200, again.text


async def test_a_body_nested_5000_deep_is_a_400_problem_not_a_502(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    secret = (await create_schedule(http, webhook_enabled=True))["webhook_secret"]
    before = await snapshot(stack.database_url)
    assert len(NESTED_5000) < 64 * 1024
    refused = assert_problem(
        await deliver(http, secret, "d-1", NESTED_5000), 400, "INPUT_OUT_OF_BOUNDS"
    )
    assert refused["found"] == "5000"
    # every JSON body the gateway parses: a run, a long task, a schedule
    for path in (RUNS, "/v1/projects/proj-p/longTasks", "/v1/projects/proj-p/schedules"):
        answer = await http.post(path, content=NESTED_5000, headers=AUTH)
        assert_problem(answer, 400, "INPUT_OUT_OF_BOUNDS")
    body = b'{"owner_id": "alice", "task_id": "t", "spec": ' + NESTED_5000 + b"}"
    assert_problem(await http.post(RUNS, content=body, headers=AUTH), 400, "INPUT_OUT_OF_BOUNDS")
    assert await snapshot(stack.database_url) == before


async def _write_spec(database_url: str, run_id: str, text: str) -> None:
    """What code from before the bounds could have stored: straight into the runs table."""
    if database_url.startswith("sqlite:///"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute("UPDATE runs SET spec = ? WHERE id = ?", (text, run_id))
        conn.close()
        return
    pg = await asyncpg.connect(database_url)
    try:
        await pg.execute("UPDATE runs SET spec = $1 WHERE id = $2", text, run_id)
    finally:
        await pg.close()


async def _create(http: httpx.AsyncClient, task: str) -> str:
    made = await http.post(
        RUNS, json={"owner_id": "alice", "task_id": task, "spec": {"command": "true"}}, headers=AUTH
    )
    assert made.status_code == 201, made.text
    run_id: str = made.json()["id"]
    return run_id


async def test_a_stored_row_no_reader_can_render_is_shown_with_a_note(
    http: httpx.AsyncClient, stack: GatewayStack, capsys: pytest.CaptureFixture[str]
) -> None:
    fine, deep, deeper = [await _create(http, f"task-{i}") for i in range(3)]
    await _write_spec(stack.database_url, deep, json.dumps({"webhook": {"payload": nested(60)}}))
    await _write_spec(stack.database_url, deeper, NESTED_5000.decode())

    shown = await every_reader_answers(http, stack, [fine, deep, deeper])
    assert shown[0]["spec"] == {"command": "true"}
    for run in shown[1:]:
        assert list(run["spec"]) == ["truerun_note"]
        assert "cannot be shown" in run["spec"]["truerun_note"]
    got = await stack.runs.GetRun(run_service_pb2.GetRunRequest(id=deeper))
    assert "nested 5000 deep" in got.spec.fields["truerun_note"].string_value
    out = capsys.readouterr().out
    assert all(run_id in out for run_id in (fine, deep, deeper))

    # and the run can still be cancelled, over gRPC and REST
    cancelled = await http.post(f"{RUNS}/{deep}:cancel", json={"reason": "poisoned"}, headers=AUTH)
    assert cancelled.status_code == 200, cancelled.text
    await stack.runs.CancelRun(run_service_pb2.CancelRunRequest(id=deeper, reason="poisoned"))
    events = await stack.runs.ListRunEvents(run_service_pb2.ListRunEventsRequest(run_id=deeper))
    assert events.events


async def test_create_run_past_a_bound_is_refused_naming_it_and_writes_nothing(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    before = await snapshot(stack.database_url)
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"command": "true", "x": nested(16)}, "depth", "INPUT_OUT_OF_BOUNDS"),
        ({"command": "true", "x": list(range(1001))}, "items", "INPUT_OUT_OF_BOUNDS"),
        ({"command": "true", "x": "y" * (16 * 1024 + 1)}, "string", "INPUT_OUT_OF_BOUNDS"),
        ({"command": "true", "x": ["y" * 8000] * 9}, "bytes", "INPUT_TOO_LARGE"),
    ]
    for spec, limit, reason in cases:
        request = run_service_pb2.CreateRunRequest(
            project_id="proj-p", owner_id="alice", task_id="t"
        )
        request.spec.update(spec)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stack.runs.CreateRun(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        info = error_info(refused.value)
        assert info.reason == reason and info.metadata["limit"] == limit, info
        assert info.metadata["setting"].startswith("TRUERUN_INPUT_MAX_")
        body = {"owner_id": "alice", "task_id": "t", "spec": spec}
        problem = assert_problem(
            await http.post(RUNS, json=body, headers=AUTH),
            413 if reason == "INPUT_TOO_LARGE" else 400,
            reason,
        )
        assert problem["limit"] == limit
    # one level shallower is accepted
    fine = {"owner_id": "alice", "task_id": "t", "spec": {"command": "true", "x": nested(15)}}
    assert await snapshot(stack.database_url) == before
    assert (await http.post(RUNS, json=fine, headers=AUTH)).status_code == 201


async def test_a_long_task_past_a_bound_is_refused_and_writes_nothing(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    before = await snapshot(stack.database_url)
    step = {"step_id": "s", "title": "t", "side_effect": "SIDE_EFFECT_CLASS_PURE"}
    draft = {"long_task_id": "lt", "owner_id": "alice", "goal": "g"}
    answer = await http.post(
        "/v1/projects/proj-p/longTasks",
        json={**draft, "steps": [{**step, "action": {"run": "x", "deep": nested(16)}}]},
        headers=AUTH,
    )
    assert assert_problem(answer, 400, "INPUT_OUT_OF_BOUNDS")["limit"] == "depth"
    async with aio_channel(stack.grpc_address, ALL) as channel:
        stub = long_task_service_pb2_grpc.LongTaskServiceStub(channel)
        grpc_step = lt.StepDraft(step_id="s", title="t", side_effect=lt.SIDE_EFFECT_CLASS_PURE)
        grpc_step.probe.update({"run": "x", "many": list(range(1001))})
        request = lt.CreateLongTaskRequest(
            long_task=lt.LongTaskDraft(
                project_id="proj-p",
                long_task_id="lt",
                owner_id="alice",
                goal="g",
                steps=[grpc_step],
            )
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CreateLongTask(request)
    assert error_info(refused.value).reason == "INPUT_OUT_OF_BOUNDS"
    assert error_info(refused.value).metadata["limit"] == "items"
    assert await snapshot(stack.database_url) == before
    fine = {**draft, "steps": [{**step, "action": {"run": "x", "deep": nested(10)}}]}
    made = await http.post("/v1/projects/proj-p/longTasks", json=fine, headers=AUTH)
    assert made.status_code == 201, made.text
