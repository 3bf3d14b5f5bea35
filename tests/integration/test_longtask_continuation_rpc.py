"""Continuations over real gRPC on loopback, on SQLite and PostgreSQL (docs/long-tasks.md
"Continuations and catch-up"): an attempt, with the callback token its run was really
started with, continues later and ends; a retried call is a no-op; an unusable continuation
is refused with INVALID_CONTINUATION and changes nothing, from the attempt and from a
person."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from truerun.v1 import long_task_service_pb2 as lt

from tests.support.longtask_api import PROJECT, create, get, refused, running
from tests.support.longtask_stack import LongTaskStack, longtask_stack
from tests.support.longtasks import snapshot
from truerun_runtime.longtask import LongTaskAttempt


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


def _in_an_hour() -> timestamp_pb2.Timestamp:
    at = timestamp_pb2.Timestamp()
    at.FromMilliseconds(int(time.time() * 1000) + 3_600_000)
    return at


async def test_an_attempt_continues_later_once(stack: LongTaskStack) -> None:
    live = await running(stack)
    try:
        spec = lt.ContinuationSpec(at=_in_an_hour(), reason="the shop opens at 9")
        ask = lt.ContinueLaterRequest(credential=live.credential, continuation=spec)
        cred = live.credential
        sdk = LongTaskAttempt(stack.address, cred.run_id, cred.run_attempt_id, cred.callback_token)
        async with sdk:  # the SDK's call, as an attempt's process makes it
            ack = await sdk.continue_later(spec)
        assert ack.state == lt.LONG_TASK_STATE_QUEUED and not ack.HasField("lease_expire_time")
        assert ack.state_reason.startswith("waiting for its continuation at ")
        assert ack.state_reason.endswith(" (truerun must be running)")
        task = await get(stack)
        again = await stack.attempts.ContinueLater(ask)  # retried: nothing changes
        assert again.state == lt.LONG_TASK_STATE_QUEUED
        after = await get(stack)
        assert after.etag == task.etag
        c = after.continuation
        assert (c.kind, c.waiting, c.label, c.reason) == (
            "at",
            True,
            ack.state_reason,
            "the shop opens at 9",
        )
        assert c.requested_by  # the attempt's actor id
        assert after.queue_position == 0 and after.display_state == "queued"
        (attempt,) = after.attempts
        assert attempt.outcome == "continues_later"
        # the lease is gone: no step action of this attempt lands any more
        begin = lt.BeginStepRequest(credential=live.credential, step_id="s1", step_version=1)
        assert (await refused(stack.attempts.BeginStep(begin)))[1] == "LONG_TASK_LEASE_NOT_HELD"
    finally:
        await live.runtime.close()


async def test_unusable_continuations_are_refused_and_change_nothing(
    stack: LongTaskStack,
) -> None:
    live = await running(stack)
    try:
        tiny = duration_pb2.Duration(seconds=1)
        bad = [
            lt.ContinuationSpec(),
            lt.ContinuationSpec(cron="0 9 * * *", at=_in_an_hour()),
            lt.ContinuationSpec(cron="not a cron"),
            lt.ContinuationSpec(cron="0 9 * * *", time_zone="Mars/Olympus"),
            lt.ContinuationSpec(at=_in_an_hour(), catchup_window=tiny),
        ]
        before = await snapshot(stack.app.store)
        for spec in bad:
            call = lt.ContinueLaterRequest(credential=live.credential, continuation=spec)
            assert await refused(stack.attempts.ContinueLater(call)) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_CONTINUATION",
            )
        assert await snapshot(stack.app.store) == before
        await create(stack, long_task_id="lt-2")
        planned = await get(stack, "lt-2")
        before = await snapshot(stack.app.store)
        for spec in bad:
            call2 = lt.ScheduleContinuationRequest(
                project_id=PROJECT, long_task_id="lt-2", etag=planned.etag, continuation=spec
            )
            assert (await refused(stack.tasks.ScheduleContinuation(call2)))[1] == (
                "INVALID_CONTINUATION"
            )
        assert await snapshot(stack.app.store) == before
    finally:
        await live.runtime.close()
