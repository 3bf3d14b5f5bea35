"""ReportUsage through the real LongTaskAttemptService on loopback, on SQLite and PostgreSQL
(docs/runtime-protocol.md "Long-task attempts"): the attempt whose run was really claimed
reports its tokens with its callback token, raw and through the SDK
(``LongTaskAttempt.report_usage``); the task shows them before the budget runs out; the
report that uses it up answers ``failed`` (no step done: no useful result), its runtime is
told to cancel the run, and the release metrics count the outcome. Bad input and strangers
change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import CollectorRegistry
from truerun.v1 import long_task_service_pb2 as lt

from services.metrics import Metrics
from tests.support.longtask_api import OWNER, create, get, refused
from tests.support.longtask_stack import LongTaskStack, longtask_stack, start_attempt
from tests.support.longtasks import snapshot
from truerun_runtime.longtask.attempt import LongTaskAttempt
from truerun_runtime.longtask.errors import LeaseNotHeld


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


def usage(credential: lt.AttemptCredential, tokens: int, usage_id: str) -> lt.ReportUsageRequest:
    return lt.ReportUsageRequest(credential=credential, tokens=tokens, usage_id=usage_id)


async def test_usage_is_shown_counted_once_and_the_used_up_budget_stops_the_task(
    stack: LongTaskStack,
) -> None:
    metrics = Metrics(CollectorRegistry())
    stack.door.listen(metrics.long_task_committed)
    await create(stack, start=True, budget=lt.LongTaskBudget(max_tokens=5000))
    live = await start_attempt(stack, "lt-1", OWNER)
    try:
        ack = await stack.attempts.ReportUsage(usage(live.credential, 1200, "call-1"))
        assert ack.state == lt.LONG_TASK_STATE_RUNNING and ack.HasField("lease_expire_time")
        again = await stack.attempts.ReportUsage(usage(live.credential, 1200, "call-1"))
        assert again.state == lt.LONG_TASK_STATE_RUNNING
        task = await get(stack)
        assert (task.budget.tokens_used, task.budget.max_tokens) == (1200, 5000)

        async with LongTaskAttempt(
            stack.address,
            live.start.run_id,
            live.start.attempt_id,
            live.start.callback_token,
            renew_every_s=60,
        ) as attempt:
            told = await attempt.report_usage(2800)  # a usage id of its own
            assert told.state == lt.LONG_TASK_STATE_RUNNING
            assert (await get(stack)).budget.tokens_used == 4000
            assert (
                metrics.registry.get_sample_value(
                    "truerun_long_task_outcome_total", {"state": "failed"}
                )
                is None
            )

            stopped = await attempt.report_usage(1500, usage_id="call-3")
            assert stopped.state == lt.LONG_TASK_STATE_FAILED  # no step done
            assert "budget of 5,000 tokens is used up (5,500 used)" in stopped.state_reason
            assert "criteria unmet: c1 (unproven), c2 (unproven, optional)" in (
                stopped.state_reason
            )
            assert not stopped.HasField("lease_expire_time")
            with pytest.raises(LeaseNotHeld):
                await attempt.report_usage(10)

        cancel = await live.runtime.expect("cancel")
        assert cancel.cancel.attempt_id == live.start.attempt_id
        task = await get(stack)
        assert task.state == lt.LONG_TASK_STATE_FAILED and task.lease_attempt_id == ""
        assert task.budget.tokens_used == 5500 and task.state_reason == stopped.state_reason
        assert (
            metrics.registry.get_sample_value(
                "truerun_long_task_outcome_total", {"state": "failed"}
            )
            == 1
        )
    finally:
        await live.runtime.close()


async def test_bad_usage_and_strangers_are_refused_and_change_nothing(
    stack: LongTaskStack,
) -> None:
    await create(stack, start=True, budget=lt.LongTaskBudget(max_tokens=5000))
    live = await start_attempt(stack, "lt-1", OWNER)
    try:
        good = live.credential
        stranger = lt.AttemptCredential(
            run_id=good.run_id, run_attempt_id=good.run_attempt_id, callback_token="guess"
        )
        before = await snapshot(stack.app.store)
        for request, expected in (
            (usage(good, 0, "u-1"), (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")),
            (usage(good, -3, "u-1"), (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")),
            (usage(good, 10, ""), (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")),
            (usage(good, 10, "bad id!"), (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")),
            (usage(stranger, 10, "u-1"), (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")),
        ):
            assert await refused(stack.attempts.ReportUsage(request)) == expected
        assert await snapshot(stack.app.store) == before
    finally:
        await live.runtime.close()
