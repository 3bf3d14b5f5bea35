"""The tenancy table's rows for the REST routes (docs/tenancy.md "REST routes"): every
authenticated operation names the RPC it calls, so the rule it is held to, and every
operation that acts on an owner's object or sends work to a runtime is tried from the other
side of each boundary through the real gateway over the real services: a person of the same
project who does not act for the owner, a token of another project, and a create for an
owner no runtime of the project serves. None changes anything."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import schedule_service_pb2 as sch

from coordinator.api.authorization import BY_RPC, Need
from coordinator.api.credentials import ApiTokens, FailureLimit
from gateway.app import GatewayConfig
from gateway.routes import ROUTES
from gateway.routes.long_tasks import COMMANDS
from gateway.routes.rpcs import OPERATION_RPCS, TOKEN_ONLY
from gateway.server import HttpServer
from tests.integration.test_every_rpc_authenticates import (
    OPERATOR_TOKEN,
    OTHER_TOKEN,
    READER_TOKEN,
    TOKENS,
    auth_services,
)
from tests.support.longtask_requests import long_task_requests
from tests.support.snapshot import snapshot

P = "/v1/projects/proj-p"
#: method, path, JSON body (None: no body), query
Call = tuple[str, str, dict[str, Any] | None, dict[str, str]]


def test_every_authenticated_operation_names_the_rpc_and_rule_it_is_held_to() -> None:
    operations = {
        op.operation_id for entry in ROUTES if not entry.public for op in entry.operations
    }
    assert operations == set(OPERATION_RPCS) | TOKEN_ONLY
    assert not set(OPERATION_RPCS) & TOKEN_ONLY
    assert all(rpc in BY_RPC for rpc in OPERATION_RPCS.values())


@contextlib.asynccontextmanager
async def _gateway(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with auth_services(url, FailureLimit(limit=10_000)) as address:
        config = GatewayConfig(grpc_target=address, tokens=ApiTokens.parse(TOKENS))
        http = HttpServer(config, "127.0.0.1:0")
        await http.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://{http.address}", timeout=30) as client:
                yield client
        finally:
            await http.stop()


def _body(message: Message, *path_fields: str) -> dict[str, Any]:
    document = MessageToDict(message, preserving_proto_field_name=True)
    for name in path_fields:
        document.pop(name, None)
    return document


def _owner_calls(run_id: str, task: lt.LongTask, schedule: sch.Schedule) -> dict[str, Call]:
    """A well-formed request for every operation whose rule is "owner", on owner x's run,
    long task and schedule in proj-p."""
    tasks = long_task_requests("proj-p", task.long_task_id, owner="x")
    calls: dict[str, Call] = {
        "create_run": ("POST", f"{P}/runs", {"owner_id": "x", "task_id": "t"}, {}),
        "cancel_run": ("POST", f"{P}/runs/{run_id}:cancel", {}, {}),
        "approve_run": ("POST", f"{P}/runs/{run_id}:approve", {}, {}),
        "retry_run": ("POST", f"{P}/runs/{run_id}:retry", {}, {}),
    }
    s = f"{P}/schedules/{schedule.schedule_id}"
    another = _body(schedule, "project_id", "etag", "create_time", "update_time")
    another["schedule_id"] = "another"
    calls |= {
        "create_schedule": ("POST", f"{P}/schedules", another, {}),
        "update_schedule": ("PATCH", s, {"etag": schedule.etag, "template": {"owner_id": "o"}}, {}),
        "delete_schedule": ("DELETE", s, None, {}),
        "pause_schedule": ("POST", f"{s}:pause", {}, {}),
        "resume_schedule": ("POST", f"{s}:resume", {}, {}),
        "fire_schedule": ("POST", f"{s}:fire", {}, {}),
        "rotateWebhookSecret_schedule": ("POST", f"{s}:rotateWebhookSecret", {}, {}),
        "backfill_schedule": (
            "POST",
            f"{s}:backfill",
            {"start_time": "1970-01-01T00:00:00Z", "end_time": "1970-01-02T00:00:00Z"},
            {},
        ),
    }
    draft = _body(tasks["CreateLongTask"], "start")["long_task"]
    draft.pop("project_id")
    draft["long_task_id"] = "another"
    calls["create_long_task"] = ("POST", f"{P}/longTasks", draft, {})
    t = f"{P}/longTasks/{task.long_task_id}"
    for verb, (method, _) in COMMANDS.items():
        body = _body(tasks[method], "project_id", "long_task_id") | {"etag": task.etag}
        calls[f"{verb}_long_task"] = ("POST", f"{t}:{verb}", body, {})
    act = _body(tasks["Act"], "project_id") | {"etag": task.etag}
    calls |= {
        "act_on_long_task": ("POST", f"{P}/longTasks:act", act, {}),
        "long_task_text_command": (
            "POST",
            f"{P}/longTasks:text",
            _body(tasks["TextCommand"], "project_id"),
            {},
        ),
        "list_notices": ("GET", f"{P}/notices", None, {"owner_id": "x"}),
        "stream_notices": ("GET", f"{P}/notices:stream", None, {"owner_id": "x"}),
        "list_notice_deliveries": ("GET", f"{P}/noticeDeliveries", None, {"owner_id": "x"}),
        "register_notice_webhook": (
            "POST",
            f"{P}/noticeWebhooks",
            _body(tasks["RegisterNoticeWebhook"], "project_id"),
            {},
        ),
    }
    return calls


async def _ask(http: httpx.AsyncClient, token: str, call: Call, etag: str = "") -> httpx.Response:
    method, path, body, query = call
    headers = {"Authorization": f"Bearer {token}"}
    if method == "DELETE":
        headers["If-Match"] = etag
    return await http.request(method, path, json=body, params=query, headers=headers)


async def _owner_objects(http: httpx.AsyncClient) -> tuple[str, lt.LongTask, sch.Schedule]:
    ops = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    run = await http.post(f"{P}/runs", json={"owner_id": "x", "task_id": "t"}, headers=ops)
    assert run.status_code == 201, run.text
    draft = _body(long_task_requests("proj-p", "lt-x", owner="x")["CreateLongTask"])
    task = await http.post(f"{P}/longTasks", json=draft["long_task"], headers=ops)
    assert task.status_code == 201, task.text
    made = await http.post(
        f"{P}/schedules",
        params={"schedule_id": "sx"},
        json={"template": {"owner_id": "x", "task_id": "t"}, "spec": {"cron": "0 3 * * *"}},
        headers=ops,
    )
    assert made.status_code == 201, made.text
    found_task = lt.LongTask()
    found_task.long_task_id = task.json()["long_task_id"]
    found_task.etag = task.headers["ETag"]
    schedule = sch.Schedule(project_id="proj-p", schedule_id="sx", etag=made.headers["ETag"])
    schedule.template.owner_id, schedule.template.task_id = "x", "t"
    schedule.spec.cron = "0 3 * * *"
    return run.json()["id"], found_task, schedule


async def test_rest_routes_on_another_owners_objects_are_refused_from_every_side(
    migrated_database_url: str,
) -> None:
    """kim (proj-p, acts for owner o) and a token of proj-q try every owner-rule operation
    on owner x's run, long task and schedule: kim gets 403 OWNER_NOT_PERMITTED (notices:
    NOTICES_OF_ANOTHER_OWNER), proj-q's token the answer a missing object gets, and the
    database is the same after every one."""
    async with _gateway(migrated_database_url) as http:
        run_id, task, schedule = await _owner_objects(http)
        calls = _owner_calls(run_id, task, schedule)
        owner_rule = {op for op, rpc in OPERATION_RPCS.items() if BY_RPC[rpc].need is Need.OWNER}
        assert set(calls) == owner_rule  # every owner-rule operation has its row
        before = await snapshot(migrated_database_url)
        for operation_id, call in calls.items():
            refused = await _ask(http, READER_TOKEN, call, schedule.etag)
            assert refused.status_code == 403, (operation_id, refused.text)
            assert refused.headers["content-type"] == "application/problem+json"
            reason = refused.json()["reason"]
            assert reason in ("OWNER_NOT_PERMITTED", "NOTICES_OF_ANOTHER_OWNER"), operation_id

            elsewhere = await _ask(http, OTHER_TOKEN, call, schedule.etag)
            missing = await _ask(http, OTHER_TOKEN, _missing(call, run_id, task, schedule))
            assert elsewhere.status_code in (403, 404), (operation_id, elsewhere.text)
            assert _shape(elsewhere) == _shape(missing), operation_id
        assert await snapshot(migrated_database_url) == before
        assert len(calls) == 3 + 1 + 8 + 13 + 3 + 1  # runs, schedules, long tasks, notices


def _missing(call: Call, run_id: str, task: lt.LongTask, schedule: sch.Schedule) -> Call:
    """The same request aimed at objects that do not exist."""
    method, path, body, query = call
    for real, absent in (
        (run_id, "01a23000-0000-7000-8000-00000000dead"),
        (f"/longTasks/{task.long_task_id}", "/longTasks/lt-none"),
        (f"/schedules/{schedule.schedule_id}", "/schedules/s-none"),
    ):
        path = path.replace(real, absent)
    return method, path, body, query


def _shape(response: httpx.Response) -> tuple[int, str]:
    """Status and reason: what tells another tenant's object from a missing one."""
    return response.status_code, response.json().get("reason", "")


async def test_rest_creates_for_an_owner_no_runtime_serves_are_refused(
    migrated_database_url: str,
) -> None:
    """Owner b's only runtime serves proj-q: a run, a schedule or a long task for b in
    proj-p could never be delivered, so each REST create is 409 OWNER_NOT_SERVED and writes
    nothing; in proj-q the same run is created."""
    ops = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    draft = _body(long_task_requests("proj-p", "lt-b", owner="b")["CreateLongTask"])
    draft["long_task"].pop("project_id")
    creates: tuple[tuple[str, dict[str, Any], dict[str, str]], ...] = (
        (f"{P}/runs", {"owner_id": "b", "task_id": "t"}, {}),
        (
            f"{P}/schedules",
            {"template": {"owner_id": "b", "task_id": "t"}, "spec": {"cron": "0 3 * * *"}},
            {"schedule_id": "sb"},
        ),
        (f"{P}/longTasks", draft["long_task"], {}),
    )
    async with _gateway(migrated_database_url) as http:
        before = await snapshot(migrated_database_url)
        for path, body, query in creates:
            refused = await http.post(path, json=body, params=query, headers=ops)
            assert refused.status_code == 409, (path, refused.text)
            assert refused.json()["reason"] == "OWNER_NOT_SERVED"
        assert await snapshot(migrated_database_url) == before
        served = await http.post(
            "/v1/projects/proj-q/runs", json={"owner_id": "b", "task_id": "t"}, headers=ops
        )
        assert served.status_code == 201, served.text
