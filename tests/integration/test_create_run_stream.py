"""RunService.CreateRunStream over real gRPC, on SQLite and PostgreSQL: each message created
as CreateRun creates it and answered in order; a message CreateRun would refuse answered
with the same status (code, message, ErrorInfo reason) while the stream goes on and nothing
is written for it; AIP-155 request ids shared with CreateRun; a stream without a token
refused."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from truerun.v1 import common_pb2, run_service_pb2
from truerun.v1 import run_service_pb2_grpc as rs_grpc

from tests.integration.test_run_service_grpc import (
    all_runs,
    create_request,
    error_info,
    raw_call,
    raw_channel,
    snapshot,
    status_info,
)
from tests.support.auth import aio_channel
from tests.support.grpc_server import grpc_run_service

READER = "reader-token"  # a token of kim, who sees proj-a only
Stream = Any  # grpc.aio.StreamStreamCall of the stream's request and response


async def _ask(stream: Stream, **fields: Any) -> run_service_pb2.CreateRunStreamResponse:
    message = run_service_pb2.CreateRunStreamRequest(request=create_request(**fields))
    await stream.write(message)
    answer = await stream.read()
    assert isinstance(answer, run_service_pb2.CreateRunStreamResponse)
    return answer


async def test_each_message_is_created_and_answered_in_order(migrated_database_url: str) -> None:
    async with grpc_run_service(migrated_database_url) as api:
        known = (await api.stub.CreateRun(create_request(idempotency_key="known"))).run
        stream = api.stub.CreateRunStream(None)
        answers = [await _ask(stream, task_id=f"t{i}") for i in range(5)]
        # The known key with the request that made its run: that run (existing).
        answers.append(await _ask(stream, idempotency_key="known"))
        answers.append(await _ask(stream, task_id="gated", requires_approval=True))
        await stream.done_writing()
        assert await stream.read() == grpc.aio.EOF  # type: ignore[attr-defined]
        assert await stream.code() == grpc.StatusCode.OK
        runs, _ = await all_runs(api, project_id="proj-a")
    assert all(a.WhichOneof("result") == "created" for a in answers)
    created = [a.created for a in answers]
    assert [c.run.task_id for c in created] == [*(f"t{i}" for i in range(5)), "task-1", "gated"]
    assert [c.existing for c in created] == [False] * 5 + [True, False]
    assert created[5].run.id == known.id
    assert created[6].run.status == common_pb2.RUN_STATUS_PENDING_APPROVAL
    assert {c.run.created_by for c in created} == {"tester"}  # from the token, as CreateRun
    assert {r.id for r in runs} == {known.id, *(c.run.id for c in created)}
    assert len(runs) == 7


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"owner_id": ""}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"priority": 5000}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"project_id": "proj-b"}, grpc.StatusCode.PERMISSION_DENIED),
        (
            {"idempotency_key": "known", "conflict_policy": common_pb2.CONFLICT_POLICY_FAIL},
            grpc.StatusCode.ALREADY_EXISTS,
        ),
        # The known key with another request (IDEMPOTENCY_KEY_REUSED, issue #36), and a key
        # in the space truerun derives its own in (RESERVED_KEY).
        ({"idempotency_key": "known", "task_id": "other"}, grpc.StatusCode.ALREADY_EXISTS),
        ({"idempotency_key": "schedule:nightly:1"}, grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
async def test_a_refused_message_is_answered_as_create_run_and_the_stream_goes_on(
    migrated_database_url: str, fields: dict[str, Any], code: grpc.StatusCode
) -> None:
    async with grpc_run_service(
        migrated_database_url, tokens=f"kim={READER}:proj-a:owners=*"
    ) as api:
        await api.stub.CreateRun(create_request(idempotency_key="known"))
        async with aio_channel(api.address, READER) as channel:
            stub = rs_grpc.RunServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as unary:
                await stub.CreateRun(create_request(**fields))
            before = await snapshot(migrated_database_url)
            stream = stub.CreateRunStream(None)
            refused = await _ask(stream, **fields)
            assert await snapshot(migrated_database_url) == before  # nothing written for it
            after = await _ask(stream, task_id="next")  # the stream goes on
            await stream.done_writing()
            assert await stream.code() == grpc.StatusCode.OK
    assert refused.WhichOneof("result") == "error"
    assert unary.value.code() == code
    assert refused.error.code == code.value[0]
    assert refused.error.message == unary.value.details()
    assert status_info(refused.error).reason == error_info(unary.value).reason
    assert after.created.run.task_id == "next" and after.created.run.created_by == "kim"


async def test_a_request_id_is_shared_with_create_run(migrated_database_url: str) -> None:
    """AIP-155: a stream message with a request_id replays as CreateRun with the same id,
    byte for byte, and creates nothing twice."""
    request_id = "00000000-0000-4000-8000-000000000042"
    async with grpc_run_service(migrated_database_url) as api, raw_channel(api) as channel:
        stream = api.stub.CreateRunStream(None)
        first = await _ask(stream, request_id=request_id)
        again = await _ask(stream, request_id=request_id)
        await stream.done_writing()
        after = await snapshot(migrated_database_url)
        replay = await raw_call(channel, "CreateRun", create_request(request_id=request_id))
        assert await snapshot(migrated_database_url) == after
    assert again == first
    assert replay == first.created.SerializeToString(deterministic=True)


async def test_a_stream_without_a_token_is_refused(migrated_database_url: str) -> None:
    async with grpc_run_service(migrated_database_url) as api:
        before = await snapshot(migrated_database_url)
        async with aio_channel(api.address, "not-a-token") as channel:
            stream = rs_grpc.RunServiceStub(channel).CreateRunStream(None)
            await stream.write(run_service_pb2.CreateRunStreamRequest(request=create_request()))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stream.read()
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert error_info(refused.value).reason == "UNAUTHENTICATED"
        assert await snapshot(migrated_database_url) == before


async def test_the_actor_is_the_token_never_the_request(migrated_database_url: str) -> None:
    """A message naming someone else as its actor creates as the stream's token."""
    admin = common_pb2.Actor(type=common_pb2.ACTOR_TYPE_OPERATOR, id="admin")
    async with grpc_run_service(
        migrated_database_url, tokens=f"kim={READER}:proj-a:owners=*"
    ) as api:
        async with aio_channel(api.address, READER) as channel:
            stream = rs_grpc.RunServiceStub(channel).CreateRunStream(None)
            answer = await _ask(stream, actor=admin)
            await stream.done_writing()
        run_id = answer.created.run.id
        listed = await api.stub.ListRunEvents(run_service_pb2.ListRunEventsRequest(run_id=run_id))
    assert answer.created.run.created_by == "kim"
    assert {(e.actor.type, e.actor.id) for e in listed.events if e.type == "run.created"} == {
        (common_pb2.ACTOR_TYPE_USER, "kim")
    }
