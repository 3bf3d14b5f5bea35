"""RunService.ListAttempts over real gRPC, on SQLite and PostgreSQL: every attempt of a run,
oldest first, with each dimension; unknown and malformed run ids are rich errors."""

from __future__ import annotations

import grpc
import pytest
from truerun.v1 import common_pb2, run_service_pb2

from coordinator.api.errors import reason_of
from coordinator.domain import commands as c
from coordinator.domain.states import RunStatus
from coordinator.service.transitions import Transitions
from tests.support.factories import SCHEDULER, evidence
from tests.support.grpc_server import GrpcApi

R = run_service_pb2
AS = common_pb2.AttemptStatus


async def test_list_attempts_returns_every_attempt_oldest_first(grpc_api: GrpcApi) -> None:
    created = await grpc_api.stub.CreateRun(
        R.CreateRunRequest(project_id="p", owner_id="o", task_id="t", max_attempts=2)
    )
    run_id = created.run.id
    transitions = Transitions(grpc_api.store)
    await transitions.execute(c.Claim(run_id, SCHEDULER, runtime_instance_id="inst-1"))
    fenced = await transitions.execute(c.StartFence(run_id, SCHEDULER, callback_token_hash="h"))
    assert fenced.attempt is not None
    failed = await transitions.execute(
        evidence(c.RuntimeResult, fenced.attempt, 1, outcome=c.RuntimeOutcome.FAILED)
    )
    assert failed.run.status is RunStatus.RETRY_WAIT
    await transitions.execute(c.RetryAttempt(run_id, SCHEDULER))

    answer = await grpc_api.stub.ListAttempts(R.ListAttemptsRequest(run_id=run_id))

    assert [a.attempt_no for a in answer.attempts] == [1, 2]
    first, second = answer.attempts
    assert (first.status, first.observed_state) == (
        AS.ATTEMPT_STATUS_FAILED,
        common_pb2.OBSERVED_STATE_FAILED,
    )
    assert first.HasField("start_request_time") and first.runtime_instance_id == "inst-1"
    assert second.status == AS.ATTEMPT_STATUS_QUEUED
    assert second.previous_attempt_id == first.id
    run = await grpc_api.stub.GetRun(R.GetRunRequest(id=run_id))
    assert run.current_attempt == second


@pytest.mark.parametrize(
    ("run_id", "code", "reason"),
    [
        # a fixed id of the right shape that no run has (collected alike by every worker)
        ("d91b4be2-1993-4a8d-ab08-fa9ddaaa0cc2", grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND"),
        ("not a run id", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        ("", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
    ],
)
async def test_list_attempts_of_a_missing_or_malformed_run_fails(
    grpc_api: GrpcApi, run_id: str, code: grpc.StatusCode, reason: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await grpc_api.stub.ListAttempts(R.ListAttemptsRequest(run_id=run_id))
    assert caught.value.code() == code
    assert reason_of(caught.value) == reason
