"""Issue #11 §3: every RPC of RunService, CapacityService, ScheduleService and
LongTaskService authenticates its caller (WebhookService: the delivery's signature;
LongTaskAttemptService: the callback token of the calling run's attempt); the
actor comes from the credential, never from the request; a token sees only its projects;
operator commands need an operator token; failed authentications are bounded. Table-driven
over the service descriptors: an RPC added later without a row in
tests/support/rpc_requests.py fails the test, and one the interceptor does not cover fails
it too. A bidirectional stream (CreateRunStream) is called with its row as its one
message; it answers a refused message in the stream, so that answer's reason is what the
project test reads. SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import (
    capacity_service_pb2_grpc,
    common_pb2,
    run_service_pb2_grpc,
    runtime_service_pb2,
    schedule_service_pb2_grpc,
)
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import schedule_service_pb2 as sch

from capacity.observations.memory import MemoryObservationStore
from coordinator.api.authorization import BY_RPC, Need
from coordinator.api.credentials import ApiTokens, FailureLimit
from coordinator.dispatch.tokens import RuntimeTokens
from kernel.db.migrate import upgrade
from services.bootstrap import capacity, coordinator, long_tasks, open_store, runtimes, schedules
from services.server import start_serving
from tests.integration.test_run_service_grpc import error_info, status_info
from tests.support.auth import aio_channel
from tests.support.longtask_requests import long_task_requests
from tests.support.rpc_requests import REQUESTS, RUN_ID, run_requests

OPERATOR_TOKEN, READER_TOKEN, OTHER_TOKEN = "op-token", "reader-token", "other-token"
SERVICE_TOKEN, PROJECT_OPERATOR_TOKEN = "service-token", "p-operator-token"
TOKENS = (
    f"ops@example={OPERATOR_TOKEN}:*:operator;kim={READER_TOKEN}:proj-p:owners=o;"
    f"{OTHER_TOKEN}:proj-q;coordinator={SERVICE_TOKEN}:*:service;"
    f"pat={PROJECT_OPERATOR_TOKEN}:proj-p:operator"
)
#: Runtime tokens: owner o's runtime serves every project, owner x's proj-p, owner b's proj-q
#: only (docs/tenancy.md): work for b in proj-p could never be delivered.
RUNTIME_TOKENS = "o:rt-o;x:rt-x:proj-p;b:rt-b:proj-q;owner-p:rt-p;owner-q:rt-q"
SERVICES = {
    "truerun.v1.RunService": rs,
    "truerun.v1.CapacityService": cap,
    "truerun.v1.ScheduleService": sch,
    "truerun.v1.LongTaskService": lt,
    "truerun.v1.LongTaskAttemptService": lt,
    "truerun.v1.RunPromotionService": lt,
}
RUN_PROMOTION = "truerun.v1.RunPromotionService"


@contextlib.asynccontextmanager
async def auth_services(url: str, failures: FailureLimit) -> AsyncIterator[str]:
    """Every service on one loopback port, with TOKENS and RUNTIME_TOKENS: its address."""
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
        failures=failures,
        schedules=schedules(app, "webhook-key"),
        long_tasks=long_tasks(app),
    )
    try:
        yield f"127.0.0.1:{serving.port}"
    finally:
        await serving.server.stop(None)
        await store.close()


@pytest.fixture
async def address(migrated_database_url: str) -> AsyncIterator[str]:
    """A server whose failure limit the table below never reaches."""
    async with auth_services(migrated_database_url, FailureLimit(limit=10_000)) as served:
        yield served


def _methods() -> list[tuple[str, str, bool]]:
    found = []
    for name, module in SERVICES.items():
        service = module.DESCRIPTOR.services_by_name[name.rsplit(".", 1)[1]]
        for method in service.methods:
            found.append((name, method.name, method.server_streaming))
    return found


async def _call(
    channel: grpc.aio.Channel,
    service: str,
    method: str,
    streaming: bool,
    request: Message | None = None,
) -> Any:
    module = SERVICES[service]
    request = request or REQUESTS[method]
    response = module.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]]
    out = response.methods_by_name[method].output_type
    response_class = module if out.file.name == module.DESCRIPTOR.name else common_pb2
    decode = getattr(response_class, out.name).FromString
    path = f"/{service}/{method}"
    if response.methods_by_name[method].client_streaming:  # one message, its answers
        stream = channel.stream_stream(path, lambda m: m.SerializeToString(), decode)(None)
        await stream.write(request)
        await stream.done_writing()
        return [item async for item in stream]
    if streaming:
        call = channel.unary_stream(path, lambda m: m.SerializeToString(), decode)(request)
        return [item async for item in call]
    return await channel.unary_unary(path, lambda m: m.SerializeToString(), decode)(request)


async def _refusal(
    channel: grpc.aio.Channel, service: str, method: str, streaming: bool, request: Message
) -> str:
    """The reason a call was refused with: its status's, or for a stream that answers
    refusals in band (CreateRunStream), its one answer's."""
    try:
        answers = await _call(channel, service, method, streaming, request)
    except grpc.aio.AioRpcError as refused:
        return str(error_info(refused).reason)
    [answer] = answers
    assert answer.WhichOneof("result") == "error", (method, answer)
    return str(status_info(answer.error).reason)


def test_every_method_has_a_row() -> None:
    assert {m for _, m, _ in _methods()} == set(REQUESTS)


@pytest.mark.parametrize(
    "token", ["", "not-a-token", f"{OPERATOR_TOKEN}x"], ids=["none", "bad", "near"]
)
async def test_every_rpc_refuses_an_unauthenticated_caller(address: str, token: str) -> None:
    async with aio_channel(address, token) as channel:
        for service, method, streaming in _methods():
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _call(channel, service, method, streaming)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, method
            assert error_info(refused.value).reason == "UNAUTHENTICATED", method


async def test_a_token_sees_only_its_projects_and_acts_as_itself(address: str) -> None:
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        request = rs.CreateRunRequest(project_id="proj-q", owner_id="o", task_id="t")
        # the request names someone else: ignored, the actor is the token's
        request.actor.CopyFrom(common_pb2.Actor(type=common_pb2.ACTOR_TYPE_OPERATOR, id="admin"))
        in_q = (await rs_stub(ops).CreateRun(request)).run
    assert in_q.created_by == "ops@example"
    async with aio_channel(address, READER_TOKEN) as reader:
        stub = rs_stub(reader)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "GetRun": lambda: stub.GetRun(rs.GetRunRequest(id=in_q.id)),
            "CancelRun": lambda: stub.CancelRun(rs.CancelRunRequest(id=in_q.id)),
            "ListRunEvents": lambda: stub.ListRunEvents(rs.ListRunEventsRequest(run_id=in_q.id)),
            "ListAttempts": lambda: stub.ListAttempts(rs.ListAttemptsRequest(run_id=in_q.id)),
            "ReadRunOutput": lambda: stub.ReadRunOutput(rs.ReadRunOutputRequest(run_id=in_q.id)),
        }
        for name, make in calls.items():  # another project's run is a missing run
            with pytest.raises(grpc.aio.AioRpcError) as hidden:
                await make()
            assert error_info(hidden.value).reason == "RUN_NOT_FOUND", name
        for name, make in {
            "CreateRun": lambda: stub.CreateRun(
                rs.CreateRunRequest(project_id="proj-q", owner_id="o", task_id="t")
            ),
            "ListRuns": lambda: stub.ListRuns(rs.ListRunsRequest(project_id="proj-q")),
            "CountRuns": lambda: stub.CountRuns(rs.CountRunsRequest(project_id="proj-q")),
            "ListProjectEvents": lambda: stub.ListProjectEvents(
                rs.ListProjectEventsRequest(project_id="proj-q")
            ),
        }.items():
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await make()
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED, name
        mine = (
            await stub.CreateRun(
                rs.CreateRunRequest(project_id="proj-p", owner_id="o", task_id="t")
            )
        ).run
        assert mine.created_by == "kim"
        with pytest.raises(grpc.aio.AioRpcError) as not_operator:
            await stub.FailRun(rs.FailRunRequest(id=mine.id, reason="because"))
        assert not_operator.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error_info(not_operator.value).reason == "PERMISSION_DENIED"
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        failed = await rs_stub(ops).FailRun(rs.FailRunRequest(id=mine.id, reason="obsolete"))
        events = (await rs_stub(ops).ListRunEvents(rs.ListRunEventsRequest(run_id=mine.id))).events
    assert failed.status == common_pb2.RUN_STATUS_FAILED
    audit = [e for e in events if e.type == "run.failed_by_operator"]
    assert [(e.actor.type, e.actor.id) for e in audit] == [
        (common_pb2.ACTOR_TYPE_OPERATOR, "ops@example")
    ]


async def test_every_run_rpc_refuses_a_token_of_another_project(address: str) -> None:
    """A run of another project is a missing run; another project is not the caller's;
    the operator commands fail first for want of an operator token. Nothing changes."""
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        request = rs.CreateRunRequest(project_id="proj-q", owner_id="o", task_id="t")
        theirs = (await rs_stub(ops).CreateRun(request)).run
    scoped = run_requests(theirs.id, "proj-q")
    run_methods = {m for s, m, _ in _methods() if s == "truerun.v1.RunService"}
    assert set(scoped) == run_methods  # a new RunService RPC needs a row here
    async with aio_channel(address, READER_TOKEN) as reader:
        for service, method, streaming in _methods():
            if service != "truerun.v1.RunService":
                continue
            reason = await _refusal(reader, service, method, streaming, scoped[method])
            assert reason in ("RUN_NOT_FOUND", "PERMISSION_DENIED"), (method, reason)
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        after = await rs_stub(ops).GetRun(rs.GetRunRequest(id=theirs.id))
    assert after.version == theirs.version


async def test_failed_authentications_are_bounded(migrated_database_url: str) -> None:
    """Past 20 failures of one token from one source within a minute that token is refused
    with RESOURCE_EXHAUSTED (and a RetryInfo); a right token from the same source is not."""
    limit = FailureLimit().limit
    async with auth_services(migrated_database_url, FailureLimit()) as address:
        codes = []
        async with aio_channel(address, "guess") as guessing:
            for _ in range(limit + 2):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await rs_stub(guessing).GetRun(rs.GetRunRequest(id=RUN_ID))
                codes.append(refused.value.code())
        async with aio_channel(address, OPERATOR_TOKEN) as right:
            with pytest.raises(grpc.aio.AioRpcError) as found:
                await rs_stub(right).GetRun(rs.GetRunRequest(id=RUN_ID))
    assert codes[:limit] == [grpc.StatusCode.UNAUTHENTICATED] * limit
    assert codes[limit:] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
    assert error_info(refused.value).reason == "TOO_MANY_FAILED_AUTHENTICATIONS"
    assert found.value.code() == grpc.StatusCode.NOT_FOUND  # authenticated: the run is missing


async def test_schedules_of_another_project_do_not_exist_and_deliveries_need_a_signature(
    address: str,
) -> None:
    """A schedule of another project is a missing schedule to every ScheduleService RPC
    that names one; a webhook delivery without a valid signature is refused the same way
    whether or not the schedule exists, and creates nothing."""
    schedule = sch.Schedule(
        project_id="proj-q",
        schedule_id="nightly",
        template=sch.RunTemplate(owner_id="o", task_id="t"),
        webhook_enabled=True,
    )
    schedule.spec.cron = "0 3 * * *"
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        stub = schedule_stub(ops)
        created = await stub.CreateSchedule(sch.CreateScheduleRequest(schedule=schedule))
        assert created.schedule.created_by == "ops@example"
        # A fire now's run is created by the token's person, never by anything in the request.
        fired = await stub.FireSchedule(
            sch.FireScheduleRequest(project_id="proj-q", schedule_id="nightly")
        )
        run = await rs_stub(ops).GetRun(rs.GetRunRequest(id=fired.runs[0].run_id))
        assert run.created_by == "ops@example" and run.trigger_type == "manual"
        created = await stub.GetSchedule(
            sch.GetScheduleRequest(project_id="proj-q", schedule_id="nightly")
        )
    named = {"project_id": "proj-q", "schedule_id": "nightly"}
    async with aio_channel(address, READER_TOKEN) as reader:
        stub = schedule_stub(reader)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "GetSchedule": lambda: stub.GetSchedule(sch.GetScheduleRequest(**named)),
            "PauseSchedule": lambda: stub.PauseSchedule(sch.PauseScheduleRequest(**named)),
            "ResumeSchedule": lambda: stub.ResumeSchedule(sch.ResumeScheduleRequest(**named)),
            "FireSchedule": lambda: stub.FireSchedule(sch.FireScheduleRequest(**named)),
            "DeleteSchedule": lambda: stub.DeleteSchedule(sch.DeleteScheduleRequest(**named)),
            "ListUpcomingFires": lambda: stub.ListUpcomingFires(
                sch.ListUpcomingFiresRequest(project_id="proj-q", schedule_id="nightly")
            ),
            "RotateWebhookSecret": lambda: stub.RotateWebhookSecret(
                sch.RotateWebhookSecretRequest(**named)
            ),
            "ListScheduleEvents": lambda: stub.ListScheduleEvents(
                sch.ListScheduleEventsRequest(project_id="proj-q", schedule_id="nightly")
            ),
        }
        for name, make in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as hidden:
                await make()
            assert error_info(hidden.value).reason == "SCHEDULE_NOT_FOUND", name
        for name, make in {
            "CreateSchedule": lambda: stub.CreateSchedule(
                sch.CreateScheduleRequest(schedule=schedule)
            ),
            "ListSchedules": lambda: stub.ListSchedules(
                sch.ListSchedulesRequest(project_id="proj-q")
            ),
        }.items():
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await make()
            assert error_info(denied.value).reason == "PERMISSION_DENIED", name
        listed = await stub.ListSchedules(sch.ListSchedulesRequest())
        assert [s.schedule_id for s in listed.schedules] == []
    async with aio_channel(address, "") as anyone:
        hooks = schedule_service_pb2_grpc.WebhookServiceStub(anyone)
        for project, schedule_id in (("proj-q", "nightly"), ("proj-q", "absent")):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await hooks.DeliverWebhook(
                    sch.DeliverWebhookRequest(
                        project_id=project,
                        schedule_id=schedule_id,
                        delivery_id="d1",
                        signature="t=1,v1=00",
                        body=b"{}",
                    )
                )
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert error_info(refused.value).reason == "WEBHOOK_SIGNATURE_INVALID"
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        after = await schedule_stub(ops).GetSchedule(sch.GetScheduleRequest(**named))
    assert after.etag == created.etag and after.last_run_id == fired.runs[0].run_id


def schedule_stub(channel: grpc.aio.Channel) -> Any:
    return schedule_service_pb2_grpc.ScheduleServiceStub(channel)


def rs_stub(channel: grpc.aio.Channel) -> Any:
    return run_service_pb2_grpc.RunServiceStub(channel)


async def test_long_tasks_of_another_project_do_not_exist(address: str) -> None:
    """Every LongTaskService RPC that names a task of another project answers as for a
    missing task; creating or listing there is denied; nothing changes."""
    scoped, service = long_task_requests("proj-q", "lt-q"), "truerun.v1.LongTaskService"
    project_wide = ("CreateLongTask", "ListLongTasks", "TextCommand", "ListNotices")
    denied = dict.fromkeys(
        (*project_wide, "RegisterNoticeWebhook", "ListNoticeDeliveries"), "PERMISSION_DENIED"
    )
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        created = await _call(ops, service, "CreateLongTask", False, scoped["CreateLongTask"])
    assert created.created_by == "ops@example"
    async with aio_channel(address, READER_TOKEN) as reader:
        for method in (m for s, m, _ in _methods() if s == service):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _call(reader, service, method, False, scoped[method])
            reason = error_info(refused.value).reason
            assert reason == denied.get(method, "LONG_TASK_NOT_FOUND"), (method, reason)
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        after = await _call(ops, service, "GetLongTask", False, scoped["GetLongTask"])
    assert after.etag == created.etag and after.state == lt.LONG_TASK_STATE_PLANNED


async def test_an_api_token_is_no_attempt_credential(address: str) -> None:
    """LongTaskAttemptService and RunPromotionService take no bearer token, an operator's
    included: without the callback token of a run's attempt every call is UNAUTHENTICATED."""
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        for service, method, streaming in _methods():
            if service not in ("truerun.v1.LongTaskAttemptService", RUN_PROMOTION):
                continue
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _call(ops, service, method, streaming)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, method
            assert error_info(refused.value).reason == "UNAUTHENTICATED", method


# -- tenancy (issue #36, docs/tenancy.md) ---------------------------------------------------


def test_every_rpc_has_exactly_one_rule() -> None:
    """The rule table (coordinator/api/authorization.py) covers every RPC of every service,
    and nothing else: an RPC added without its rule fails here."""
    every = set()
    for module in (rs, cap, sch, lt, runtime_service_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            every |= {f"{service.name}.{m.name}" for m in service.methods}
    assert every == set(BY_RPC)


def cap_stub(channel: grpc.aio.Channel) -> Any:
    return capacity_service_pb2_grpc.CapacityServiceStub(channel)


async def _denied(call: Awaitable[Any]) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    return f"{refused.value.code().name} {error_info(refused.value).reason}"


async def test_capacity_writes_come_only_from_the_service_identity(address: str) -> None:
    """The finding: a plain proj-b token reported an observation for proj-a's owner and
    claimed its run, lease token and spec included, and set its agent's fairness. Now
    observations and claims need truerun's service identity, agent settings an operator of
    every project, and a claim takes only runs of the projects it says its runtime serves."""
    ghost = cap.Observation(
        owner_id="o",
        runtime_instance_id="ghost",
        routes=[cap.Route(device_id="ghost-dev", kind="stream")],
        limit=1,
    )
    claim = cap.ClaimRequest(
        owner_id="o", runtime_instance_id="ghost", device_id="ghost-dev", max_attempts=5
    )
    agent = cap.ConfigureAgentRequest(
        agent=cap.Agent(agent_id="g", concurrency=1, fairness_weight=50)
    )
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        request = rs.CreateRunRequest(project_id="proj-p", owner_id="o", task_id="t")
        theirs = (await rs_stub(ops).CreateRun(request)).run
    for token in (READER_TOKEN, OTHER_TOKEN, OPERATOR_TOKEN, PROJECT_OPERATOR_TOKEN):
        async with aio_channel(address, token) as channel:
            stub = cap_stub(channel)
            report = stub.ReportObservation(cap.ReportObservationRequest(observation=ghost))
            assert await _denied(report) == "PERMISSION_DENIED PERMISSION_DENIED", token
            claimed = stub.Claim(cap.ClaimRequest(served_project_ids=["*"], **_fields(claim)))
            assert await _denied(claimed) == "PERMISSION_DENIED PERMISSION_DENIED", token
    for token in (READER_TOKEN, OTHER_TOKEN, PROJECT_OPERATOR_TOKEN, SERVICE_TOKEN):
        async with aio_channel(address, token) as channel:
            configured = cap_stub(channel).ConfigureAgent(agent)
            assert await _denied(configured) == "PERMISSION_DENIED PERMISSION_DENIED", token
    async with aio_channel(address, SERVICE_TOKEN) as service:
        stub = cap_stub(service)  # a service token reads no person's run
        assert await _denied(rs_stub(service).GetRun(rs.GetRunRequest(id=theirs.id))) == (
            "NOT_FOUND RUN_NOT_FOUND"
        )
        await stub.ReportObservation(cap.ReportObservationRequest(observation=ghost))
        elsewhere = await stub.Claim(
            cap.ClaimRequest(request_id=RUN_ID, served_project_ids=["proj-q"], **_fields(claim))
        )
        assert list(elsewhere.claimed) == []  # a runtime of proj-q never gets proj-p's run
        async with aio_channel(address, OPERATOR_TOKEN) as ops:
            untouched = await rs_stub(ops).GetRun(rs.GetRunRequest(id=theirs.id))
            assert untouched.version == theirs.version
            assert untouched.status == common_pb2.RUN_STATUS_QUEUED
            assert (await cap_stub(ops).ConfigureAgent(agent)).fairness_weight == 50
        served = await stub.Claim(cap.ClaimRequest(served_project_ids=["proj-p"], **_fields(claim)))
    assert [c.run_id for c in served.claimed] == [theirs.id]


def _fields(message: Message) -> dict[str, Any]:
    return {field.name: value for field, value in message.ListFields()}


def _schedule(owner: str, schedule_id: str, project: str = "proj-p") -> sch.Schedule:
    schedule = sch.Schedule(
        project_id=project,
        schedule_id=schedule_id,
        template=sch.RunTemplate(owner_id=owner, task_id="t"),
    )
    schedule.spec.cron = "0 3 * * *"
    return schedule


def _schedule_requests(found: sch.Schedule) -> dict[str, Message]:
    """A request for every ScheduleService RPC that changes or fires ``found``."""
    named = {"project_id": found.project_id, "schedule_id": found.schedule_id}
    backfill = sch.BackfillScheduleRequest(
        project_id=found.project_id, schedule_id=found.schedule_id
    )
    backfill.start_time.FromMilliseconds(0)
    backfill.end_time.FromMilliseconds(86_400_000)
    mine = sch.Schedule()
    mine.CopyFrom(found)
    mine.template.owner_id = "o"  # handing another owner's schedule to oneself: refused too
    return {
        "CreateSchedule": sch.CreateScheduleRequest(
            schedule=_schedule(found.template.owner_id, "another")
        ),
        "UpdateSchedule": sch.UpdateScheduleRequest(schedule=mine),
        "DeleteSchedule": sch.DeleteScheduleRequest(**named, etag=found.etag),
        "PauseSchedule": sch.PauseScheduleRequest(**named),
        "ResumeSchedule": sch.ResumeScheduleRequest(**named),
        "BackfillSchedule": backfill,
        "FireSchedule": sch.FireScheduleRequest(**named),
        "RotateWebhookSecret": sch.RotateWebhookSecretRequest(**named),
    }


async def test_another_owners_objects_need_an_operator_of_their_project(address: str) -> None:
    """The finding: a person's token paused another owner's long task by handle and by id.
    Now every RPC whose rule is "owner" refuses a token of the same project that does not act
    for the object's owner (OWNER_NOT_PERMITTED; notices: NOTICES_OF_ANOTHER_OWNER), changes
    nothing, while reads within the project stay open and an operator of the project acts."""
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        run = (
            await rs_stub(ops).CreateRun(
                rs.CreateRunRequest(project_id="proj-p", owner_id="x", task_id="t")
            )
        ).run
        tasks = long_task_requests("proj-p", "lt-x", owner="x")
        task = await _call(
            ops, "truerun.v1.LongTaskService", "CreateLongTask", False, tasks["CreateLongTask"]
        )
        schedule = (
            await schedule_stub(ops).CreateSchedule(
                sch.CreateScheduleRequest(schedule=_schedule("x", "sx"))
            )
        ).schedule
    rows = {
        "truerun.v1.RunService": run_requests(run.id, "proj-p", owner="x"),
        "truerun.v1.LongTaskService": tasks,
        "truerun.v1.ScheduleService": _schedule_requests(schedule),
    }
    checked = []
    async with aio_channel(address, READER_TOKEN) as kim:
        for service, method, streaming in _methods():
            rule = BY_RPC[f"{service.rsplit('.', 1)[1]}.{method}"]
            if service not in rows or rule.need is not Need.OWNER:
                continue
            reason = await _refusal(kim, service, method, streaming, rows[service][method])
            assert reason in ("OWNER_NOT_PERMITTED", "NOTICES_OF_ANOTHER_OWNER"), (method, reason)
            checked.append(method)
        # reads within the project stay as documented
        assert (await rs_stub(kim).GetRun(rs.GetRunRequest(id=run.id))).owner_id == "x"
        seen = await schedule_stub(kim).GetSchedule(
            sch.GetScheduleRequest(project_id="proj-p", schedule_id="sx")
        )
    assert len(checked) == 3 + 3 + 16 + 8  # creates, cancel/retry/approve, long tasks, schedules
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        after = await _call(
            ops, "truerun.v1.LongTaskService", "GetLongTask", False, tasks["GetLongTask"]
        )
        assert (await rs_stub(ops).GetRun(rs.GetRunRequest(id=run.id))).version == run.version
    assert after.etag == task.etag and after.state == lt.LONG_TASK_STATE_PLANNED
    assert seen.etag == schedule.etag
    async with aio_channel(address, PROJECT_OPERATOR_TOKEN) as pat:  # an operator of proj-p
        cancelled = await rs_stub(pat).CancelRun(rs.CancelRunRequest(id=run.id))
    assert cancelled.run.status == common_pb2.RUN_STATUS_CANCELLED


async def test_work_outside_every_runtime_binding_is_refused(address: str) -> None:
    """Owner b's only runtime serves proj-q: runs, schedules and long tasks for b in proj-p
    could never be delivered, so every RPC that would send b work there is refused with
    OWNER_NOT_SERVED and creates nothing; the same in proj-q is accepted."""
    outside = {
        **{
            ("truerun.v1.RunService", m): r
            for m, r in run_requests(RUN_ID, "proj-p", owner="b").items()
            if m in ("CreateRun", "CreateRuns", "CreateRunStream")
        },
        ("truerun.v1.ScheduleService", "CreateSchedule"): sch.CreateScheduleRequest(
            schedule=_schedule("b", "sb")
        ),
        ("truerun.v1.LongTaskService", "CreateLongTask"): long_task_requests(
            "proj-p", "lt-b", owner="b"
        )["CreateLongTask"],
    }
    async with aio_channel(address, OPERATOR_TOKEN) as ops:
        for (service, method), request in outside.items():
            streaming = method == "CreateRunStream"
            reason = await _refusal(ops, service, method, streaming, request)
            assert reason == "OWNER_NOT_SERVED", (method, reason)
        listed = await rs_stub(ops).ListRuns(rs.ListRunsRequest(project_id="proj-p"))
        assert [r.owner_id for r in listed.runs if r.owner_id == "b"] == []
        served = await rs_stub(ops).CreateRun(
            rs.CreateRunRequest(project_id="proj-q", owner_id="b", task_id="t")
        )
        await schedule_stub(ops).CreateSchedule(
            sch.CreateScheduleRequest(schedule=_schedule("b", "sb", "proj-q"))
        )
    assert served.run.owner_id == "b" and served.run.project_id == "proj-q"
