"""`truerun pause | resume | fail | resolve` against a real server: the audited commands
reach the API with the operator and the reason, and a refusal is a readable error."""

from __future__ import annotations

import asyncio

import pytest
from truerun.v1 import common_pb2, run_service_pb2

from services.cli.main import main
from tests.integration.test_operator_commands_grpc import unknown_run
from tests.integration.test_run_service_grpc import all_events, create
from tests.support.auth import TEST_TOKEN
from tests.support.grpc_server import GrpcApi


async def truerun(api: GrpcApi, *argv: str) -> int:
    # The CLI is synchronous; the server shares this event loop, so the CLI runs aside.
    argv = (argv[0], "--server", api.address, "--token", TEST_TOKEN, *argv[1:])
    return await asyncio.to_thread(main, list(argv))


async def test_pause_resume_fail_and_resolve_from_the_command_line(
    grpc_api: GrpcApi, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await create(grpc_api)
    assert await truerun(grpc_api, "pause", run.id, "--reason", "disk full") == 0
    assert "paused" in capsys.readouterr().out
    paused = [e for e in await all_events(grpc_api, run.id) if e.type == "run.paused"]
    # the operator is the token's name, never something the command line asserts
    assert [(e.actor.id, e.payload["reason"]) for e in paused] == [("tester", "disk full")]

    assert await truerun(grpc_api, "resume", run.id, "--reason", "disk freed") == 0
    assert await truerun(grpc_api, "fail", run.id, "--reason", "obsolete") == 0
    got = await grpc_api.stub.GetRun(run_service_pb2.GetRunRequest(id=run.id))
    assert got.status == common_pb2.RUN_STATUS_FAILED

    # a refusal (a finished run cannot be paused) is an error message and exit status 1
    assert await truerun(grpc_api, "pause", run.id, "--reason", "again") != 0
    assert "INVALID_RUN_TRANSITION" in capsys.readouterr().err

    unknown = await unknown_run(grpc_api)
    code = await truerun(
        grpc_api, "resolve", unknown, "--as", "not-started", "--reason", "host was off"
    )
    assert code == 0
    requeued = await grpc_api.stub.GetRun(run_service_pb2.GetRunRequest(id=unknown))
    assert requeued.status == common_pb2.RUN_STATUS_QUEUED and requeued.attempt_count == 2


def test_a_reason_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["pause", "0190d5a0-0000-7000-8000-000000000000"])
    assert exited.value.code == 2
    assert "--reason" in capsys.readouterr().err
