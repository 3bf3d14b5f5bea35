"""Issue #36's multi-tenant check: two projects, two owners, two runtimes each bound to one
project (docs/tenancy.md). 200 cross-tenant attempts drawn at random (create, claim, act,
answer, approve, configure, read; over gRPC and REST) interleaved with the tenants' own
actions: no attempt succeeds, none leaks (another tenant's real object is answered exactly
as a missing one, its id aside), every legitimate action succeeds, and the other tenant's
objects are unchanged. SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import (
    capacity_service_pb2_grpc,
    long_task_service_pb2_grpc,
    run_service_pb2_grpc,
)
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import run_service_pb2 as rs

from capacity.observations.memory import MemoryObservationStore
from coordinator.api.credentials import ApiTokens
from coordinator.dispatch.tokens import RuntimeTokens
from gateway.app import GatewayConfig
from gateway.server import HttpServer
from kernel.db.migrate import upgrade
from services.bootstrap import capacity, coordinator, long_tasks, open_store, runtimes
from services.server import start_serving
from tests.integration.test_run_service_grpc import error_info
from tests.support.auth import aio_channel

TOKENS = (
    "alice=ta:proj-a;bob=tb:proj-b;ops-a=toa:proj-a:operator;ops-b=tob:proj-b:operator;"
    "coordinator=ts:*:service"
)
RUNTIME_TOKENS = "alice:rt-alice:proj-a;bob:rt-bob:proj-b"
MISSING_RUN = "01a23000-0000-7000-8000-00000000dead"
ATTEMPTS = 200


@dataclass
class Tenant:
    token: str
    project: str
    owner: str
    run_id: str = ""
    task_id: str = ""


@contextlib.asynccontextmanager
async def _stack(url: str) -> AsyncIterator[tuple[str, str]]:
    """The gRPC services (with runtimes bound as RUNTIME_TOKENS says) and the gateway over
    them; yields (the gateway's base URL, the gRPC address)."""
    await upgrade(url)
    store = await open_store(url)
    app = coordinator(store)
    caps = capacity(app, MemoryObservationStore(), 15_000)
    tokens = ApiTokens.parse(TOKENS)
    serving = await start_serving(
        app,
        "127.0.0.1:0",
        caps,
        runtimes(app, caps, RuntimeTokens.parse(RUNTIME_TOKENS)),
        tokens=tokens,
        long_tasks=long_tasks(app),
    )
    grpc_address = f"127.0.0.1:{serving.port}"
    http = HttpServer(GatewayConfig(grpc_target=grpc_address, tokens=tokens), "127.0.0.1:0")
    await http.start()
    try:
        yield f"http://{http.address}", grpc_address
    finally:
        await http.stop()
        await serving.server.stop(None)
        await store.close()


def _answer_of(error: grpc.aio.AioRpcError, object_id: str) -> tuple[str, str, str]:
    """What a refusal says, with the object's id blanked (a real and a missing id differ)."""
    message = (error.details() or "").replace(object_id, "<id>")
    return error.code().name, error_info(error).reason, message


async def _refused(call: Awaitable[Any], object_id: str = "") -> tuple[str, str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    return _answer_of(refused.value, object_id)


def _rest_answer(response: httpx.Response, object_id: str) -> tuple[int, str]:
    return response.status_code, response.text.replace(object_id, "<id>")


async def test_two_tenants_cannot_reach_each_other(migrated_database_url: str) -> None:
    rng = random.Random(36)
    a = Tenant("ta", "proj-a", "alice")
    b = Tenant("tb", "proj-b", "bob")
    async with _stack(migrated_database_url) as (base, address):
        for tenant in (a, b):  # each tenant's own objects, by its own token
            async with aio_channel(address, tenant.token) as channel:
                created = await run_service_pb2_grpc.RunServiceStub(channel).CreateRun(
                    rs.CreateRunRequest(
                        project_id=tenant.project,
                        owner_id=tenant.owner,
                        task_id="t",
                        requires_approval=True,
                    )
                )
                tenant.run_id = created.run.id
                task = await long_task_service_pb2_grpc.LongTaskServiceStub(channel).CreateLongTask(
                    lt.CreateLongTaskRequest(
                        long_task=lt.LongTaskDraft(
                            project_id=tenant.project,
                            long_task_id=f"lt-{tenant.owner}",
                            owner_id=tenant.owner,
                            goal="g",
                            steps=[
                                lt.StepDraft(
                                    step_id="s", title="t", side_effect=lt.SIDE_EFFECT_CLASS_PURE
                                )
                            ],
                        )
                    )
                )
                tenant.task_id = task.long_task_id
        before = {t.owner: await _read(address, t) for t in (a, b)}
        outcomes: dict[str, int] = {"refused": 0, "legit": 0}
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for n in range(ATTEMPTS):
                me, other = (a, b) if rng.random() < 0.5 else (b, a)
                attack = rng.choice(_ATTACKS)
                await attack(address, client, me, other)
                outcomes["refused"] += 1
                if n % 4 == 0:  # the tenants' own work goes on meanwhile
                    await rng.choice(_LEGIT)(address, client, me)
                    outcomes["legit"] += 1
        after = {t.owner: await _read(address, t) for t in (a, b)}
    assert outcomes == {"refused": ATTEMPTS, "legit": ATTEMPTS // 4}
    assert after == before  # the legitimate actions read and create; nothing else changed


async def _read(address: str, tenant: Tenant) -> tuple[int, str]:
    async with aio_channel(address, f"to{tenant.project[-1]}") as ops:
        run = await run_service_pb2_grpc.RunServiceStub(ops).GetRun(
            rs.GetRunRequest(id=tenant.run_id)
        )
        task = await long_task_service_pb2_grpc.LongTaskServiceStub(ops).GetLongTask(
            lt.GetLongTaskRequest(project_id=tenant.project, long_task_id=tenant.task_id)
        )
    return run.version, task.etag


Attack = Callable[[str, httpx.AsyncClient, Tenant, Tenant], Awaitable[None]]


async def _run_rpc_as_missing(address: str, me: Tenant, other: Tenant, method: str) -> None:
    """The other tenant's run is answered exactly as a missing one."""
    async with aio_channel(address, me.token) as channel:
        stub = run_service_pb2_grpc.RunServiceStub(channel)
        call = getattr(stub, method)
        make: Callable[[str], Any] = {
            "GetRun": lambda i: rs.GetRunRequest(id=i),
            "CancelRun": lambda i: rs.CancelRunRequest(id=i),
            "RetryRun": lambda i: rs.RetryRunRequest(id=i),
            "ApproveRun": lambda i: rs.ApproveRunRequest(id=i),
            "ListRunEvents": lambda i: rs.ListRunEventsRequest(run_id=i),
            "ReadRunOutput": lambda i: rs.ReadRunOutputRequest(run_id=i),
        }[method]
        real = await _refused(call(make(other.run_id)), other.run_id)
        missing = await _refused(call(make(MISSING_RUN)), MISSING_RUN)
    assert real == missing and real[:2] == ("NOT_FOUND", "RUN_NOT_FOUND"), (method, real)


def _run_attack(method: str) -> Attack:
    async def attack(address: str, client: httpx.AsyncClient, me: Tenant, other: Tenant) -> None:
        await _run_rpc_as_missing(address, me, other, method)

    return attack


async def _create_in_other_project(
    address: str, client: httpx.AsyncClient, me: Tenant, other: Tenant
) -> None:
    async with aio_channel(address, me.token) as channel:
        answer = await _refused(
            run_service_pb2_grpc.RunServiceStub(channel).CreateRun(
                rs.CreateRunRequest(project_id=other.project, owner_id=other.owner, task_id="x")
            )
        )
    assert answer[:2] == ("PERMISSION_DENIED", "PERMISSION_DENIED"), answer


async def _create_for_other_owner(
    address: str, client: httpx.AsyncClient, me: Tenant, other: Tenant
) -> None:
    """In one's own project, for the other tenant's owner: a person acts for themself; an
    operator of the project may, but no runtime of that owner serves the project."""
    request = rs.CreateRunRequest(project_id=me.project, owner_id=other.owner, task_id="x")
    async with aio_channel(address, me.token) as channel:
        person = await _refused(run_service_pb2_grpc.RunServiceStub(channel).CreateRun(request))
    async with aio_channel(address, f"to{me.project[-1]}") as channel:
        operator = await _refused(run_service_pb2_grpc.RunServiceStub(channel).CreateRun(request))
    assert person[:2] == ("PERMISSION_DENIED", "OWNER_NOT_PERMITTED"), person
    assert operator[:2] == ("FAILED_PRECONDITION", "OWNER_NOT_SERVED"), operator


async def _claim_as_a_tenant(
    address: str, client: httpx.AsyncClient, me: Tenant, other: Tenant
) -> None:
    observation = cap.Observation(
        owner_id=other.owner,
        runtime_instance_id="ghost",
        routes=[cap.Route(device_id="ghost-dev", kind="stream")],
        limit=1,
    )
    for token in (me.token, f"to{me.project[-1]}"):
        async with aio_channel(address, token) as channel:
            stub = capacity_service_pb2_grpc.CapacityServiceStub(channel)
            reported = await _refused(
                stub.ReportObservation(cap.ReportObservationRequest(observation=observation))
            )
            claimed = await _refused(
                stub.Claim(
                    cap.ClaimRequest(
                        owner_id=other.owner,
                        runtime_instance_id="ghost",
                        device_id="ghost-dev",
                        max_attempts=5,
                        served_project_ids=["*"],
                    )
                )
            )
            configured = await _refused(
                stub.ConfigureAgent(
                    cap.ConfigureAgentRequest(agent=cap.Agent(agent_id="g", concurrency=1))
                )
            )
        for answer in (reported, claimed, configured):
            assert answer[:2] == ("PERMISSION_DENIED", "PERMISSION_DENIED"), answer


async def _act_on_other_task(
    address: str, client: httpx.AsyncClient, me: Tenant, other: Tenant
) -> None:
    """By id (pause, answer a decision) and by handle: the same answer as a missing task."""
    async with aio_channel(address, me.token) as channel:
        stub = long_task_service_pb2_grpc.LongTaskServiceStub(channel)
        for task_id in (other.task_id, "lt-missing"):
            paused = await _refused(
                stub.PauseLongTask(
                    lt.PauseLongTaskRequest(
                        project_id=other.project, long_task_id=task_id, etag="1"
                    )
                ),
                task_id,
            )
            answered = await _refused(
                stub.AnswerDecision(
                    lt.AnswerDecisionRequest(
                        project_id=other.project,
                        long_task_id=task_id,
                        decision_id="d",
                        etag="1",
                        answer="yes",
                    )
                ),
                task_id,
            )
            assert paused == answered and paused[:2] == ("NOT_FOUND", "LONG_TASK_NOT_FOUND")
        handle = await _refused(
            stub.Act(
                lt.ActRequest(
                    project_id=other.project,
                    owner_id=other.owner,
                    task="#1",
                    action="pause",
                    action_id="a",
                )
            )
        )
    assert handle[:2] == ("NOT_FOUND", "LONG_TASK_NOT_FOUND"), handle


async def _rest_read_and_cancel(
    address: str, client: httpx.AsyncClient, me: Tenant, other: Tenant
) -> None:
    auth = {"Authorization": f"Bearer {me.token}"}
    for suffix, method in (("", "GET"), (":cancel", "POST")):
        answers = []
        for run_id in (other.run_id, MISSING_RUN):
            path = f"/v1/projects/{other.project}/runs/{run_id}{suffix}"
            response = await client.request(method, path, headers=auth, json={})
            answers.append(_rest_answer(response, run_id))
        assert answers[0] == answers[1] and answers[0][0] in (403, 404), answers
    created = await client.post(
        f"/v1/projects/{other.project}/runs",
        json={"owner_id": other.owner, "task_id": "x"},
        headers=auth,
    )
    assert created.status_code == 403, created.text


_ATTACKS: list[Attack] = [
    *(
        _run_attack(m)
        for m in ("GetRun", "CancelRun", "RetryRun", "ApproveRun", "ListRunEvents", "ReadRunOutput")
    ),
    _create_in_other_project,
    _create_for_other_owner,
    _claim_as_a_tenant,
    _act_on_other_task,
    _rest_read_and_cancel,
]

Legit = Callable[[str, httpx.AsyncClient, Tenant], Awaitable[None]]


async def _read_own(address: str, client: httpx.AsyncClient, me: Tenant) -> None:
    async with aio_channel(address, me.token) as channel:
        run = await run_service_pb2_grpc.RunServiceStub(channel).GetRun(
            rs.GetRunRequest(id=me.run_id)
        )
    assert run.owner_id == me.owner
    response = await client.get(
        f"/v1/projects/{me.project}/runs/{me.run_id}",
        headers={"Authorization": f"Bearer {me.token}"},
    )
    assert response.status_code == 200 and response.json()["id"] == me.run_id


async def _create_own(address: str, client: httpx.AsyncClient, me: Tenant) -> None:
    response = await client.post(
        f"/v1/projects/{me.project}/runs",
        json={"owner_id": me.owner, "task_id": "mine"},
        headers={"Authorization": f"Bearer {me.token}"},
    )
    assert response.status_code == 201, response.text


_LEGIT: list[Legit] = [_read_own, _create_own]
