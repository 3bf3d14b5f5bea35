"""An idempotent long-task step always has its own stable, non-empty idempotency key (issue
#36, finding 6; docs/long-tasks.md "3. Steps"), through real gRPC on loopback, on SQLite and
PostgreSQL.

The repro: a plan whose idempotent step declared no key was accepted; the runtime was
SIGKILLed after the step's POST was recorded (its intent) and before the POST's answer;
recovery retried the step by its class (the idempotent row of the recovery table), both
intents carried the key "", the effect happened twice and the task ended ``completed``.

What holds now:
- that plan is refused where it is written, naming the step (CreateLongTask, RevisePlan,
  ContinueLongTask, PromoteRun: its remaining steps and its absorbed calls), INVALID_ARGUMENT,
  nothing written; the door refuses it too when called past the API;
- RecordIntent of an idempotent step records the step's declared key (none in the request
  means it) and refuses another key, and a step stored without a key, writing nothing;
- the same plan with a key, through the repro's shape (the attempt dies between its intent
  and the answer, recovery retries the step): every intent carries that one key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import run_service_pb2 as rs

from kernel.errors import InvalidArgument
from longtasks.domain.model import StepDraft
from longtasks.domain.states import SideEffect
from tests.integration.test_run_service_grpc import error_info
from tests.support.longtask_api import OWNER, PROJECT, create, get, refused, step_of, struct
from tests.support.longtask_stack import LiveAttempt, LongTaskStack, longtask_stack, start_attempt
from tests.support.longtasks import ANA, execute, snapshot
from tests.support.scripted_runtime import ScriptedRuntime

IDEMPOTENT = lt.SIDE_EFFECT_CLASS_IDEMPOTENT
KEY = "notify-2026-w48"
KEYLESS = "step notify is idempotent but has no idempotency_key"


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


def notify(key: str, step_id: str = "notify") -> lt.StepDraft:
    """The repro's step: an idempotent POST whose command takes the step's key."""
    return lt.StepDraft(
        step_id=step_id,
        title="POST the notification",
        side_effect=IDEMPOTENT,
        idempotency_key=key,
        action=struct(run='post-notification --key "$TRUERUN_IDEMPOTENCY_KEY"', receipt="json"),
    )


def plan(key: str) -> dict[str, Any]:
    """The repro's task: that one step, done when its receipt is recorded."""
    return {
        "steps": [notify(key)],
        "criteria": [
            lt.CriterionDraft(
                criterion_id="posted",
                text="the notification is out",
                checker_kind="receipt_present",
                checker=struct(step_id="notify"),
            )
        ],
    }


def assert_keyless(error: grpc.aio.AioRpcError, step_id: str = "notify") -> None:
    """INVALID_ARGUMENT naming the step, in the message and in the ErrorInfo."""
    info = error_info(error)
    assert (error.code(), info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert f"step {step_id} is idempotent but has no idempotency_key" in (error.details() or "")
    assert info.metadata["step_id"] == step_id


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


@pytest.mark.parametrize("key", ["", "   "], ids=["no-key", "blank-key"])
async def test_the_repro_plan_is_refused_at_creation_and_nothing_is_written(
    stack: LongTaskStack, key: str
) -> None:
    before = await snapshot(stack.app.store)
    assert_keyless(await rpc_error(create(stack, start=True, **plan(key))))
    assert await snapshot(stack.app.store) == before  # no task, no run, no attempt
    assert await refused(get(stack)) == (grpc.StatusCode.NOT_FOUND, "LONG_TASK_NOT_FOUND")


async def test_revisions_and_continuations_refuse_a_keyless_idempotent_step(
    stack: LongTaskStack,
) -> None:
    task = await create(stack, **plan(KEY))
    before = await snapshot(stack.app.store)
    revise = lt.RevisePlanRequest(
        project_id=PROJECT,
        long_task_id="lt-1",
        etag=task.etag,
        reason="one more post",
        steps=[notify(KEY), notify("", "again")],
    )
    assert_keyless(await rpc_error(stack.tasks.RevisePlan(revise)), "again")
    # retermed: the pending step may not lose its key either
    del revise.steps[:]
    revise.steps.append(notify(""))
    assert_keyless(await rpc_error(stack.tasks.RevisePlan(revise)))
    go_on = lt.ContinueLongTaskRequest(
        project_id=PROJECT,
        long_task_id="lt-1",
        etag=task.etag,
        reason="and again",
        steps=[notify("", "again")],
    )
    assert_keyless(await rpc_error(stack.tasks.ContinueLongTask(go_on)), "again")
    # the door refuses it too, past the API's drafts (plans.revise_steps)
    keyless = StepDraft("again", "POST it again", SideEffect.IDEMPOTENT)
    with pytest.raises(InvalidArgument) as door:
        await stack.door.revise_plan("lt-1", int(task.etag), ANA, "again", steps=[keyless])
    assert door.value.metadata["refusal"] == "INVALID_PLAN"
    assert "step again is idempotent but has no idempotency_key" in door.value.message
    assert await snapshot(stack.app.store) == before
    # with its key it is a new plan version
    del revise.steps[:]
    revise.steps.extend([notify(KEY), notify("notify-again", "again")])
    revised = await stack.tasks.RevisePlan(revise)
    assert revised.plan_version == 2
    assert step_of(revised, "again").idempotency_key == "notify-again"


async def test_a_promotion_refuses_a_keyless_idempotent_step_or_absorbed_call(
    stack: LongTaskStack,
) -> None:
    created = await stack.runs.CreateRun(
        rs.CreateRunRequest(project_id=PROJECT, owner_id=OWNER, task_id="tools")
    )
    runtime = ScriptedRuntime(stack.runtime, owner=OWNER, instance="inst-tools")
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=1)
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        credential = lt.AttemptCredential(
            run_id=start.run_id,
            run_attempt_id=start.attempt_id,
            callback_token=start.callback_token,
        )
        goal = lt.LongTaskDraft(goal="post the notification")
        remaining = lt.PromoteRunRequest(
            credential=credential, long_task=goal, path=lt.ACTIVATION_PATH_PLAN
        )
        remaining.long_task.steps.append(notify(""))
        before = await snapshot(stack.app.store)
        assert_keyless(await rpc_error(stack.promotions.PromoteRun(remaining)))
        absorbed = lt.PromoteRunRequest(
            credential=credential,
            long_task=goal,
            path=lt.ACTIVATION_PATH_LAZY,
            absorbed=[
                lt.AbsorbedCall(
                    step_id="edit",
                    title="edit the notes",
                    side_effect=IDEMPOTENT,
                    target="NOTES.md",
                    summary="append the release's notes",
                )
            ],
        )
        absorbed.long_task.steps.append(notify(KEY))
        assert_keyless(await rpc_error(stack.promotions.PromoteRun(absorbed)), "edit")
        assert await snapshot(stack.app.store) == before  # the run was not told to stop
        run = await stack.runs.GetRun(rs.GetRunRequest(id=created.run.id))
        assert run.cancel_reason == ""
        # keyed, the same promotion is a long task whose absorbed effect carries its key
        absorbed.absorbed[0].idempotency_key = "edit-notes-2.1"
        promoted = await stack.promotions.PromoteRun(absorbed)
        task = await get(stack, promoted.long_task_id)
        (effect,) = step_of(task, "edit").effects
        assert effect.idempotency_key == "edit-notes-2.1"
    finally:
        await runtime.close()


async def _begin(stack: LongTaskStack, live: LiveAttempt, step_id: str = "notify") -> int:
    version = step_of(await get(stack), step_id).version
    begun = await stack.attempts.BeginStep(
        lt.BeginStepRequest(credential=live.credential, step_id=step_id, step_version=version)
    )
    return begun.step.version


def _intent(live: LiveAttempt, version: int, key: str = "") -> lt.RecordIntentRequest:
    return lt.RecordIntentRequest(
        credential=live.credential,
        step_id="notify",
        step_version=version,
        target="https://hooks.example/notify",
        summary="POST the weekly notification",
        idempotency_key=key,
    )


async def test_with_its_key_the_repro_retries_with_that_key_and_no_other(
    stack: LongTaskStack,
) -> None:
    """The repro's shape with a keyed step: attempt 1 records the POST's intent and dies
    before the answer; recovery retries the step by its class; attempt 2 may not make the
    effect with a key of its own, only with the step's."""
    await create(stack, start=True, **plan(KEY))
    first = await start_attempt(stack, "lt-1", OWNER)
    try:
        intent = await stack.attempts.RecordIntent(_intent(first, await _begin(stack, first)))
        assert intent.step.current_effect.idempotency_key == KEY  # none given: the step's
    finally:
        await first.runtime.close()
    # the runtime is SIGKILLed before the POST's answer: its run ends, the watcher ends it
    await stack.door.attempt_ended("lt-1", first.attempt_id, "its run ended lost")
    after = step_of(await get(stack), "notify")
    assert after.state == lt.STEP_STATE_UNCERTAIN

    second = await start_attempt(stack, "lt-1", OWNER)
    try:
        version = await _begin(stack, second)  # retried by its class: its key is stable
        before = await snapshot(stack.app.store)
        made_up = await rpc_error(
            stack.attempts.RecordIntent(_intent(second, version, f"notify-{second.attempt_id}"))
        )
        assert made_up.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert f"idempotency_key {KEY!r}" in (made_up.details() or "")
        assert await snapshot(stack.app.store) == before
        again = await stack.attempts.RecordIntent(_intent(second, version, KEY))
        assert again.step.current_effect.idempotency_key == KEY
    finally:
        await second.runtime.close()
    effects = step_of(await get(stack), "notify").effects
    assert [e.idempotency_key for e in effects] == [KEY, KEY]  # never "", never another


async def test_a_step_stored_without_a_key_records_no_intent(stack: LongTaskStack) -> None:
    """A task written before plans were checked for keys: its keyless idempotent step's
    intent is refused (with no key, and with one the attempt makes up), nothing written,
    so its effect never starts with an empty key."""
    await create(stack, start=True, **plan(KEY))
    live = await start_attempt(stack, "lt-1", OWNER)
    try:
        await execute(
            stack.app.store,
            "UPDATE long_task_steps SET idempotency_key = NULL"
            " WHERE task_id = 'lt-1' AND step_id = 'notify'",
        )
        version = await _begin(stack, live)
        before = await snapshot(stack.app.store)
        for key in ("", "made-up-by-the-attempt"):
            error = await rpc_error(stack.attempts.RecordIntent(_intent(live, version, key)))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert KEYLESS in (error.details() or "")
        assert await snapshot(stack.app.store) == before
        notify_now = step_of(await get(stack), "notify")
        assert notify_now.state == lt.STEP_STATE_RUNNING and not notify_now.effects
    finally:
        await live.runtime.close()
