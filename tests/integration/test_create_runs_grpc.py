"""RunService.CreateRuns and concurrent CreateRun calls over real gRPC, on SQLite and
PostgreSQL: the runs in request order through the grouped writes, a bad item or a project
the token does not see refusing the whole call with nothing written, and AIP-155 replays of
concurrent creates answered byte for byte."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import grpc
import pytest
from truerun.v1 import common_pb2, run_service_pb2
from truerun.v1 import run_service_pb2_grpc as rs_grpc

from coordinator.store.base import RunStore
from tests.integration.test_run_service_grpc import (
    all_runs,
    create_request,
    expect_error,
    raw_call,
    raw_channel,
    snapshot,
)
from tests.support.auth import aio_channel
from tests.support.grpc_server import grpc_run_service
from tests.support.recording_store import Recording

READER = "reader-token"  # a token of kim, who sees proj-a only


def _many(n: int, **fields: Any) -> run_service_pb2.CreateRunsRequest:
    return run_service_pb2.CreateRunsRequest(
        requests=[create_request(task_id=f"t{i}", **fields) for i in range(n)]
    )


async def test_create_runs_answers_in_request_order(migrated_database_url: str) -> None:
    recording: list[Recording] = []

    def wrap(store: RunStore) -> RunStore:
        recording.append(Recording(store))
        return cast(RunStore, recording[0])

    async with grpc_run_service(migrated_database_url, wrap_store=wrap) as api:
        known = (await api.stub.CreateRun(create_request(idempotency_key="known"))).run
        recording[0].writes.clear()
        request = _many(500)
        # The known key with the request that made its run (another request: refused).
        request.requests[7].CopyFrom(create_request(idempotency_key="known"))
        request.requests[9].idempotency_key = "fresh"
        request.requests[11].requires_approval = True
        answer = await api.stub.CreateRuns(request)
        runs, _ = await all_runs(api, project_id="proj-a")
    responses = list(answer.responses)
    assert [r.run.task_id for r in responses] == [
        "task-1" if i == 7 else f"t{i}" for i in range(500)
    ]
    assert [i for i, r in enumerate(responses) if r.existing] == [7]
    assert responses[7].run.id == known.id
    assert responses[9].run.idempotency_key == "fresh" and not responses[9].existing
    assert responses[11].run.status == common_pb2.RUN_STATUS_PENDING_APPROVAL
    assert {r.run.created_by for r in responses} == {"tester"}
    assert len({r.run.id for r in responses}) == 500 and len(runs) == 500
    writes = recording[0].writes
    assert sum(n for _, n in writes) == 499  # the known key wrote nothing
    assert len(writes) <= 10  # grouped: 64 creates a write, never one each


@pytest.mark.parametrize(
    ("index", "fields", "says"),
    [
        (3, {"owner_id": ""}, "owner_id"),
        (0, {"request_id": "0b9a1c39-1f0c-4d6e-9a8f-5d2a4f1b7e11"}, "request_id"),
        (4, {"conflict_policy": common_pb2.CONFLICT_POLICY_FAIL}, "conflict_policy"),
        (
            5,
            {"execution_scope": "s", "scope_policy": common_pb2.SCOPE_POLICY_REJECT_NEW},
            "scope_policy",
        ),
        (6, {"priority": 5000}, "priority"),
    ],
)
async def test_one_bad_item_refuses_the_whole_call(
    migrated_database_url: str, index: int, fields: dict[str, Any], says: str
) -> None:
    async with grpc_run_service(migrated_database_url) as api:
        before = await snapshot(migrated_database_url)
        request = _many(8)
        request.requests[index].CopyFrom(create_request(**fields))
        info = await expect_error(
            api.stub.CreateRuns(request), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await api.stub.CreateRuns(request)
        details = refused.value.details() or ""
        assert f"requests[{index}]" in details and says in details
        assert info.reason == "INVALID_ARGUMENT"
        for empty_or_too_many in (0, 501):
            await expect_error(
                api.stub.CreateRuns(_many(empty_or_too_many)),
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_ARGUMENT",
            )
        assert await snapshot(migrated_database_url) == before


async def test_create_runs_in_a_project_the_token_does_not_see_writes_nothing(
    migrated_database_url: str,
) -> None:
    async with grpc_run_service(
        migrated_database_url, tokens=f"kim={READER}:proj-a:owners=*"
    ) as api:
        before = await snapshot(migrated_database_url)
        request = _many(3)
        request.requests[2].project_id = "proj-b"
        async with aio_channel(api.address, READER) as channel:
            stub = rs_grpc.RunServiceStub(channel)
            await expect_error(
                stub.CreateRuns(request), grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"
            )
            assert await snapshot(migrated_database_url) == before
            mine = await stub.CreateRuns(_many(2))
    assert [r.run.created_by for r in mine.responses] == ["kim", "kim"]
    assert [r.run.project_id for r in mine.responses] == ["proj-a", "proj-a"]


async def test_concurrent_create_runs_with_request_ids_replay_byte_for_byte(
    migrated_database_url: str,
) -> None:
    """Concurrent CreateRun calls, each with its own request_id, share group writes; each
    record committed with its run, so each replay is its first answer's bytes."""
    async with grpc_run_service(migrated_database_url) as api, raw_channel(api) as channel:
        requests = [
            create_request(task_id=f"t{i}", request_id=f"00000000-0000-4000-8000-{i:012d}")
            for i in range(30)
        ]
        first = await asyncio.gather(*(raw_call(channel, "CreateRun", r) for r in requests))
        after_first = await snapshot(migrated_database_url)
        again = await asyncio.gather(*(raw_call(channel, "CreateRun", r) for r in requests))
        assert again == first
        assert await snapshot(migrated_database_url) == after_first
    ids = {run_service_pb2.CreateRunResponse.FromString(b).run.id for b in first}
    assert len(ids) == 30
