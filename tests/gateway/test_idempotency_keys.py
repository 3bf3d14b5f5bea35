"""Issue #36, findings 4 and 5, from their repros on a live stack (gRPC services + gateway),
on SQLite and PostgreSQL (docs/state-model.md "6a. Idempotency keys and request ids").

4. The keys truerun derives for its own runs cannot be squatted: a CreateRun (gRPC, REST
   header or body, CreateRuns, CreateRunStream) with a schedule's next fire key or a webhook
   delivery's key is refused RESERVED_KEY and writes nothing, and the schedule's real fire
   and the genuine delivery then create the run of its template.
5. The same Idempotency-Key or request_id with a different request is refused (REST 422,
   gRPC ALREADY_EXISTS, IDEMPOTENCY_KEY_REUSED) naming the first run, and writes nothing;
   the same key with the same request still answers the first run (``existing``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2
from truerun.v1 import run_service_pb2

from automations.domain.webhooks import sign
from kernel.ids import now_ms
from services.bootstrap import scheduler
from tests.gateway.test_rest import assert_problem
from tests.integration.test_run_service_grpc import expect_error, status_info
from tests.support.gateway_stack import ALL, GatewayStack, bearer
from tests.support.snapshot import Snapshot, snapshot

AUTH = bearer(ALL)
RUNS = "/v1/projects/proj-p/runs"
SCHEDULES = "/v1/projects/proj-p/schedules"
NIGHTLY = f"{SCHEDULES}/nightly"
INVALID = grpc.StatusCode.INVALID_ARGUMENT
ALREADY = grpc.StatusCode.ALREADY_EXISTS
#: What a squatter creates under a key it does not own: another owner's task.
FOREIGN = {"owner_id": "mallory", "task_id": "exfiltrate", "spec": {"command": "cat secrets"}}


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


async def _schedule(http: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {
        "schedule_id": "nightly",
        "template": {"owner_id": "alice", "task_id": "report", "spec": {"command": "true"}},
        "spec": {"interval": "900s"},
        "overlap_policy": "OVERLAP_POLICY_ALLOW_ALL",
        **fields,
    }
    response = await http.post(SCHEDULES, json=body, headers=AUTH)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _grpc_create(**fields: Any) -> run_service_pb2.CreateRunRequest:
    values: dict[str, Any] = {"project_id": "proj-p", **FOREIGN, **fields}
    spec = struct_pb2.Struct()
    spec.update(values.pop("spec"))
    return run_service_pb2.CreateRunRequest(spec=spec, **values)


async def _squat_everywhere(http: httpx.AsyncClient, stack: GatewayStack, key: str) -> None:
    """Every public way of creating a run under ``key`` (or with it as the request id) is
    refused RESERVED_KEY, and none of them writes anything."""
    runs = stack.runs
    await expect_error(runs.CreateRun(_grpc_create(idempotency_key=key)), INVALID, "RESERVED_KEY")
    await expect_error(runs.CreateRun(_grpc_create(request_id=key)), INVALID, "RESERVED_KEY")
    many = run_service_pb2.CreateRunsRequest(
        requests=[_grpc_create(task_id="fine"), _grpc_create(idempotency_key=key)]
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await runs.CreateRuns(many)
    assert refused.value.code() == INVALID and "requests[1]" in (refused.value.details() or "")
    stream = runs.CreateRunStream(None)
    await stream.write(
        run_service_pb2.CreateRunStreamRequest(request=_grpc_create(idempotency_key=key))
    )
    answer = await stream.read()
    await stream.done_writing()
    assert isinstance(answer, run_service_pb2.CreateRunStreamResponse)
    assert answer.WhichOneof("result") == "error"
    assert status_info(answer.error).reason == "RESERVED_KEY"
    header = await http.post(RUNS, json=FOREIGN, headers={**AUTH, "Idempotency-Key": key})
    assert_problem(header, 400, "RESERVED_KEY")
    body = await http.post(RUNS, json={**FOREIGN, "idempotency_key": key}, headers=AUTH)
    assert_problem(body, 400, "RESERVED_KEY")
    as_request_id = await http.post(RUNS, json={**FOREIGN, "request_id": key}, headers=AUTH)
    assert_problem(as_request_id, 400, "RESERVED_KEY")
    listed = (await http.get(RUNS, headers=AUTH)).json()
    assert all(r["task_id"] != "exfiltrate" for r in listed.get("runs", []))


async def test_a_schedules_next_fire_key_cannot_be_squatted_and_the_fire_runs_its_template(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    schedule = (await _schedule(http))["schedule"]
    fire_ms = _ms(schedule["next_fire_time"])
    key = f"schedule:nightly:{fire_ms}"
    await _squat_everywhere(http, stack, key)
    # A fire now's request id is checked by the same rule (ScheduleService.FireSchedule).
    fire_now = await http.post(f"{NIGHTLY}:fire", headers={**AUTH, "Idempotency-Key": key})
    assert_problem(fire_now, 400, "RESERVED_KEY")

    # The real fire, by a scheduler replica at the fire time: its run is the template's.
    assert await scheduler(stack.app, "replica", clock=lambda: fire_ms).one()
    runs = (await http.get(f"{NIGHTLY}/runs", headers=AUTH)).json()["runs"]
    assert [(r["idempotency_key"], r["task_id"], r["owner_id"]) for r in runs] == [
        (key, "report", "alice")
    ]
    assert runs[0]["trigger_type"] == "schedule" and runs[0]["spec"]["command"] == "true"
    events = (await http.get(f"{NIGHTLY}/events", headers=AUTH)).json()["events"]
    assert not any("already has run" in e.get("message", "") for e in events)


async def test_a_webhook_delivery_key_cannot_be_squatted_and_the_delivery_runs_its_template(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    secret = (await _schedule(http, webhook_enabled=True))["webhook_secret"]
    await _squat_everywhere(http, stack, "schedule:nightly:delivery:delivery-1")
    # Any key a long task's attempt would get is as reserved.
    await expect_error(
        stack.runs.CreateRun(_grpc_create(idempotency_key="long_task:T1:attempt:1")),
        INVALID,
        "RESERVED_KEY",
    )

    body = b'{"ref": "refs/heads/main"}'
    signature = sign(secret, now_ms(), "delivery-1", body)
    delivered = await http.post(
        f"{NIGHTLY}:deliver",
        content=body,
        headers={"X-Truerun-Delivery": "delivery-1", "X-Truerun-Signature": signature},
    )
    assert delivered.status_code == 200, delivered.text
    (fired,) = delivered.json()["runs"]
    assert not fired["existing"]  # the genuine delivery makes its own run
    run = (await http.get(f"{RUNS}/{fired['run_id']}", headers=AUTH)).json()
    assert (run["task_id"], run["owner_id"], run["trigger_type"]) == ("report", "alice", "webhook")
    assert run["idempotency_key"] == "schedule:nightly:delivery:delivery-1"
    assert run["spec"]["webhook"]["delivery_id"] == "delivery-1"


async def test_the_same_idempotency_key_with_another_body_is_422_naming_the_first_run(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    body_a = {
        "owner_id": "alice",
        "task_id": "build",
        "spec": {"command": "make", "env": {"A": "1", "B": "2"}},
    }
    headers = {**AUTH, "Idempotency-Key": "deploy-42"}
    first = await http.post(RUNS, json=body_a, headers=headers)
    assert first.status_code == 201, first.text
    run_a = first.json()

    # The same request (its JSON members in another order) is the first run, 200.
    same = {
        "spec": {"env": {"B": "2", "A": "1"}, "command": "make"},
        "task_id": "build",
        "owner_id": "alice",
    }
    again = await http.post(RUNS, json=same, headers=headers)
    assert again.status_code == 200 and again.json()["id"] == run_a["id"]

    before = await stack_rows(stack)
    for changed in (
        {**body_a, "spec": {"command": "rm -rf /"}},
        {**body_a, "task_id": "other"},
        {**body_a, "owner_id": "bob"},
        {**body_a, "priority": 5},
        {**body_a, "requires_approval": True},
    ):
        refused = await http.post(RUNS, json=changed, headers=headers)
        problem = assert_problem(refused, 422, "IDEMPOTENCY_KEY_REUSED")
        assert problem["run_id"] == run_a["id"] and run_a["id"] in problem["detail"]
        in_body = await http.post(
            RUNS, json={**changed, "idempotency_key": "deploy-42"}, headers=AUTH
        )
        assert assert_problem(in_body, 422, "IDEMPOTENCY_KEY_REUSED")["run_id"] == run_a["id"]

    # gRPC: ALREADY_EXISTS naming the first run, for CreateRun, CreateRuns and the stream.
    other = _grpc_create(owner_id="alice", task_id="build", idempotency_key="deploy-42")
    info = await expect_error(stack.runs.CreateRun(other), ALREADY, "IDEMPOTENCY_KEY_REUSED")
    assert info.metadata["run_id"] == run_a["id"]
    many = run_service_pb2.CreateRunsRequest(requests=[_grpc_create(task_id="fresh"), other])
    info = await expect_error(stack.runs.CreateRuns(many), ALREADY, "IDEMPOTENCY_KEY_REUSED")
    assert info.metadata["run_id"] == run_a["id"]
    stream = stack.runs.CreateRunStream(None)
    await stream.write(run_service_pb2.CreateRunStreamRequest(request=other))
    answer = await stream.read()
    await stream.done_writing()
    assert isinstance(answer, run_service_pb2.CreateRunStreamResponse)
    assert answer.error.code == ALREADY.value[0]
    assert status_info(answer.error).metadata["run_id"] == run_a["id"]
    assert await stack_rows(stack) == before  # no refusal wrote anything

    # The first run's own request over gRPC is that run.
    same_grpc = _grpc_create(idempotency_key="deploy-42", **body_a)
    replay = await stack.runs.CreateRun(same_grpc)
    assert replay.existing and replay.run.id == run_a["id"]


async def test_the_same_request_id_with_another_request_is_refused_naming_the_first_run(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    request_id = "0b9a1c39-1f0c-4d6e-9a8f-5d2a4f1b7e11"
    body = {"owner_id": "alice", "task_id": "build", "request_id": request_id}
    first = await http.post(RUNS, json=body, headers=AUTH)
    assert first.status_code == 201, first.text
    run_a = first.json()
    replay = await http.post(RUNS, json=body, headers=AUTH)
    assert replay.status_code == 201 and replay.json() == run_a  # AIP-155: the first answer

    before = await stack_rows(stack)
    other = await http.post(RUNS, json={**body, "task_id": "other"}, headers=AUTH)
    assert assert_problem(other, 422, "IDEMPOTENCY_KEY_REUSED")["run_id"] == run_a["id"]
    info = await expect_error(
        stack.runs.CreateRun(
            _grpc_create(owner_id="alice", task_id="other", request_id=request_id)
        ),
        ALREADY,
        "IDEMPOTENCY_KEY_REUSED",
    )
    assert info.metadata["run_id"] == run_a["id"]
    assert info.metadata["request_id"] == request_id
    assert await stack_rows(stack) == before


async def test_two_items_of_one_create_runs_with_one_key_for_two_runs_create_nothing(
    stack: GatewayStack,
) -> None:
    before = await stack_rows(stack)
    many = run_service_pb2.CreateRunsRequest(
        requests=[
            _grpc_create(task_id="fresh"),
            _grpc_create(task_id="a", idempotency_key="k"),
            _grpc_create(task_id="b", idempotency_key="k"),
        ]
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stack.runs.CreateRuns(many)
    assert refused.value.code() == INVALID and "requests[2]" in (refused.value.details() or "")
    assert await stack_rows(stack) == before
    # The same item twice is one run, answered twice.
    twice = run_service_pb2.CreateRunsRequest(
        requests=[_grpc_create(task_id="a", idempotency_key="k")] * 2
    )
    answer = await stack.runs.CreateRuns(twice)
    assert len({r.run.id for r in answer.responses}) == 1


async def stack_rows(stack: GatewayStack) -> Snapshot:
    return await snapshot(stack.database_url)
