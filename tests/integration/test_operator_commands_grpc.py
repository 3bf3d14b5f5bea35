"""The operator's audited commands over real gRPC, on SQLite and PostgreSQL.

Runs are brought to unknown / lost through the transition service (as the dispatcher and
the reconciler do); the commands are then called over the wire and their effect is read back
through the API and, for "changes nothing", from the database directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from truerun.v1 import common_pb2, run_service_pb2

from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service.transitions import Transitions
from tests.integration.test_run_service_grpc import (
    all_events,
    create,
    etag,
    expect_error,
    raw_call,
    raw_channel,
    snapshot,
)
from tests.support.factories import evidence, spec, started
from tests.support.grpc_server import GrpcApi

R = run_service_pb2
RS = common_pb2.RunStatus
DS = common_pb2.DisplayState
# The operator is the test server's operator token ("tester"): an actor in a request is ignored.
OPERATOR = common_pb2.Actor(type=common_pb2.ACTOR_TYPE_OPERATOR, id="tester")
RECONCILER = Actor(ActorType.RECONCILER, "leases")
INVALID = grpc.StatusCode.INVALID_ARGUMENT
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION


async def unknown_run(api: GrpcApi, *, running: bool = False, **overrides: Any) -> str:
    """A run whose attempt was started and then went silent: display ``unknown``."""
    transitions = Transitions(api.store)
    fenced, attempt = await started(transitions, **overrides)
    if running:
        await transitions.execute(evidence(c.RuntimeRunning, attempt, 1))
    await transitions.execute(c.DispatchUnknown(fenced.run.id, RECONCILER))
    return fenced.run.id


async def lost_run(api: GrpcApi, **overrides: Any) -> str:
    transitions = Transitions(api.store)
    fenced, _ = await started(transitions, **overrides)
    await transitions.execute(c.MarkLost(fenced.run.id, RECONCILER, reason="runtime_replaced"))
    return fenced.run.id


def audited(event: common_pb2.RunEvent, reason: str) -> None:
    """The command's own event names the operator (as actor and in the payload) and why."""
    payload = dict(event.payload.items())
    assert event.actor.id == OPERATOR.id
    assert event.actor.type == common_pb2.ACTOR_TYPE_OPERATOR
    assert payload["operator"] == OPERATOR.id
    assert payload["reason"] == reason


async def events_of(api: GrpcApi, run_id: str) -> dict[str, common_pb2.RunEvent]:
    return {e.type: e for e in await all_events(api, run_id)}


async def test_missing_reason_and_bad_input_change_nothing(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    stub = grpc_api.stub
    queued = await create(grpc_api)
    unknown = await unknown_run(grpc_api)
    before = await snapshot(migrated_database_url)
    ok: dict[str, Any] = {"actor": OPERATOR, "reason": "because"}
    cases: dict[str, Callable[[], Awaitable[Any]]] = {
        "pause without reason": lambda: stub.PauseRun(
            R.PauseRunRequest(id=queued.id, actor=OPERATOR)
        ),
        "pause blank reason": lambda: stub.PauseRun(
            R.PauseRunRequest(id=queued.id, actor=OPERATOR, reason="   ")
        ),
        "pause reason 513 chars": lambda: stub.PauseRun(
            R.PauseRunRequest(id=queued.id, actor=OPERATOR, reason="r" * 513)
        ),
        "pause bad id": lambda: stub.PauseRun(R.PauseRunRequest(id="nope", **ok)),
        "pause garbage etag": lambda: stub.PauseRun(
            R.PauseRunRequest(id=queued.id, etag="garbage", **ok)
        ),
        "fail without reason": lambda: stub.FailRun(R.FailRunRequest(id=queued.id, actor=OPERATOR)),
        "resume without reason": lambda: stub.ResumeRun(R.ResumeRunRequest(id=queued.id)),
        "requeue without reason": lambda: stub.RequeueRun(
            R.RequeueRunRequest(id=queued.id, actor=OPERATOR)
        ),
        "resolve unspecified resolution": lambda: stub.ResolveRun(
            R.ResolveRunRequest(id=unknown, **ok)
        ),
        "resolve resolution=99": lambda: stub.ResolveRun(
            R.ResolveRunRequest(id=unknown, resolution=99, **ok)  # type: ignore[arg-type]
        ),
        "resolve without reason": lambda: stub.ResolveRun(
            R.ResolveRunRequest(id=unknown, actor=OPERATOR, resolution=R.RESOLUTION_FAILED)
        ),
        "resolve with request_id, no reason": lambda: stub.ResolveRun(
            R.ResolveRunRequest(
                id=unknown,
                actor=OPERATOR,
                resolution=R.RESOLUTION_FAILED,
                request_id=str(uuid.uuid4()),
            )
        ),
    }
    for name, call in cases.items():
        try:
            await expect_error(call(), INVALID, "INVALID_ARGUMENT")
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from failure
    # Commands on runs in the wrong state: FAILED_PRECONDITION, and nothing written either.
    wrong_state: dict[str, Callable[[], Awaitable[Any]]] = {
        "resume a queued run": lambda: stub.ResumeRun(R.ResumeRunRequest(id=queued.id, **ok)),
        "requeue a queued run": lambda: stub.RequeueRun(R.RequeueRunRequest(id=queued.id, **ok)),
        "resolve a queued run": lambda: stub.ResolveRun(
            R.ResolveRunRequest(id=queued.id, resolution=R.RESOLUTION_SUCCEEDED, **ok)
        ),
        "pause an unknown run": lambda: stub.PauseRun(R.PauseRunRequest(id=unknown, **ok)),
        "fail an unknown run": lambda: stub.FailRun(R.FailRunRequest(id=unknown, **ok)),
    }
    for name, call in wrong_state.items():
        try:
            await expect_error(call(), PRECONDITION, "INVALID_RUN_TRANSITION")
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from failure
    await expect_error(
        stub.PauseRun(R.PauseRunRequest(id=str(uuid.uuid4()), **ok)),
        grpc.StatusCode.NOT_FOUND,
        "RUN_NOT_FOUND",
    )
    assert await snapshot(migrated_database_url) == before


async def test_pause_and_resume_a_queued_run(grpc_api: GrpcApi) -> None:
    stub = grpc_api.stub
    run = await create(grpc_api)
    paused = await stub.PauseRun(
        R.PauseRunRequest(id=run.id, etag=run.etag, actor=OPERATOR, reason="host maintenance")
    )
    assert paused.status == RS.RUN_STATUS_PAUSED
    assert paused.display_state == DS.DISPLAY_STATE_PAUSED
    assert paused.current_attempt.status == common_pb2.ATTEMPT_STATUS_QUEUED
    # a stale etag is a conflict
    await expect_error(
        stub.ResumeRun(
            R.ResumeRunRequest(id=run.id, etag=etag(run.version), actor=OPERATOR, reason="x")
        ),
        grpc.StatusCode.ABORTED,
        "RUN_VERSION_CONFLICT",
    )
    resumed = await stub.ResumeRun(
        R.ResumeRunRequest(id=run.id, actor=OPERATOR, reason="maintenance over")
    )
    assert resumed.status == RS.RUN_STATUS_QUEUED
    assert resumed.display_state == DS.DISPLAY_STATE_QUEUED
    assert resumed.current_attempt_id == run.current_attempt_id  # the same attempt row
    assert resumed.attempt_count == 1
    events = await events_of(grpc_api, run.id)
    audited(events["run.paused"], "host maintenance")
    audited(events["run.resumed"], "maintenance over")


async def test_fail_a_queued_or_paused_run(grpc_api: GrpcApi) -> None:
    stub = grpc_api.stub
    for pause_first in (False, True):
        run = await create(grpc_api)
        if pause_first:
            await stub.PauseRun(R.PauseRunRequest(id=run.id, actor=OPERATOR, reason="hold"))
        failed = await stub.FailRun(
            R.FailRunRequest(id=run.id, actor=OPERATOR, reason="input file is corrupt")
        )
        assert failed.status == RS.RUN_STATUS_FAILED
        assert failed.display_state == DS.DISPLAY_STATE_FAILED
        assert failed.error_code == "failed_by_operator"
        assert failed.error_summary == "input file is corrupt"
        # the attempt never started: it is cancelled, not failed
        assert failed.current_attempt.status == common_pb2.ATTEMPT_STATUS_CANCELLED
        audited((await events_of(grpc_api, run.id))["run.failed_by_operator"], failed.error_summary)


async def test_resolve_an_unknown_attempt_as_succeeded_or_failed(grpc_api: GrpcApi) -> None:
    stub = grpc_api.stub
    for resolution, status, attempt_status in (
        (R.RESOLUTION_SUCCEEDED, RS.RUN_STATUS_SUCCEEDED, common_pb2.ATTEMPT_STATUS_SUCCEEDED),
        (R.RESOLUTION_FAILED, RS.RUN_STATUS_FAILED, common_pb2.ATTEMPT_STATUS_FAILED),
    ):
        run_id = await unknown_run(grpc_api, running=True, max_attempts=3)
        before = await stub.GetRun(R.GetRunRequest(id=run_id))
        assert before.display_state == DS.DISPLAY_STATE_UNKNOWN
        resolved = await stub.ResolveRun(
            R.ResolveRunRequest(
                id=run_id, actor=OPERATOR, reason="checked the host", resolution=resolution
            )
        )
        assert resolved.status == status
        assert resolved.current_attempt.status == attempt_status
        assert resolved.current_attempt_id == before.current_attempt_id
        assert resolved.attempt_count == 1  # no automatic retry after a person's verdict
        event = (await events_of(grpc_api, run_id))["run.resolved"]
        audited(event, "checked the host")


async def test_resolve_not_started_requeues_on_a_new_attempt(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    stub = grpc_api.stub
    run_id = await unknown_run(grpc_api)
    before = await stub.GetRun(R.GetRunRequest(id=run_id))
    request = R.ResolveRunRequest(
        id=run_id,
        actor=OPERATOR,
        reason="the host never got it",
        resolution=R.RESOLUTION_NOT_STARTED,
        request_id=str(uuid.uuid4()),
    )
    async with raw_channel(grpc_api) as channel:
        first = await raw_call(channel, "ResolveRun", request)
        state = await snapshot(migrated_database_url)
        # AIP-155: a replay answers with the same bytes and writes nothing
        assert await raw_call(channel, "ResolveRun", request) == first
        assert await snapshot(migrated_database_url) == state
    resolved = common_pb2.Run.FromString(first)
    assert resolved.status == RS.RUN_STATUS_QUEUED
    assert resolved.display_state == DS.DISPLAY_STATE_QUEUED
    assert resolved.attempt_count == 2
    assert resolved.current_attempt.attempt_no == 2
    assert resolved.current_attempt_id != before.current_attempt_id
    assert resolved.current_attempt.previous_attempt_id == before.current_attempt_id
    events = await all_events(grpc_api, run_id)
    types = [e.type for e in events]
    tail = types[types.index("run.resolved") :]
    assert tail == ["run.resolved", "attempt.lost", "run.lost", "run.retrying", "run.queued"]
    audited(events[types.index("run.resolved")], "the host never got it")


async def test_resolve_not_started_is_refused_when_the_runtime_reported_running(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    run_id = await unknown_run(grpc_api, running=True)
    before = await snapshot(migrated_database_url)
    await expect_error(
        grpc_api.stub.ResolveRun(
            R.ResolveRunRequest(
                id=run_id, actor=OPERATOR, reason="guess", resolution=R.RESOLUTION_NOT_STARTED
            )
        ),
        PRECONDITION,
        "INVALID_RUN_TRANSITION",
    )
    assert await snapshot(migrated_database_url) == before


async def test_resolve_a_lost_attempt(grpc_api: GrpcApi) -> None:
    stub = grpc_api.stub
    succeeded_id = await lost_run(grpc_api)
    succeeded = await stub.ResolveRun(
        R.ResolveRunRequest(
            id=succeeded_id,
            actor=OPERATOR,
            reason="output is in the bucket",
            resolution=R.RESOLUTION_SUCCEEDED,
        )
    )
    assert succeeded.status == RS.RUN_STATUS_SUCCEEDED
    assert succeeded.current_attempt.status == common_pb2.ATTEMPT_STATUS_LOST  # history stays
    requeued_id = await lost_run(grpc_api)
    requeued = await stub.ResolveRun(
        R.ResolveRunRequest(
            id=requeued_id,
            actor=OPERATOR,
            reason="never reached the host",
            resolution=R.RESOLUTION_NOT_STARTED,
        )
    )
    assert requeued.status == RS.RUN_STATUS_QUEUED and requeued.attempt_count == 2


async def test_a_created_run_for_the_spec_helper_is_independent(grpc_api: GrpcApi) -> None:
    """The transition-service setup and the API see the same store."""
    created = await Transitions(grpc_api.store).create(spec())
    got = await grpc_api.stub.GetRun(R.GetRunRequest(id=created.run.id))
    assert got.status == RS.RUN_STATUS_QUEUED
