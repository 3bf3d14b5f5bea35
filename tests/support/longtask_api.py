"""The long-task API suites' shared pieces: a task draft as a person sends it, the calls
every test makes, and a refusal's code and stable reason."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from truerun.v1 import long_task_service_pb2 as lt

from tests.integration.test_run_service_grpc import error_info
from tests.support.longtask_stack import LiveAttempt, LongTaskStack, start_attempt

PROJECT, OWNER = "proj", "alice"


def struct(**values: Any) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


def draft(task_id: str = "lt-1", **overrides: Any) -> lt.LongTaskDraft:
    """Three steps (pure, non-idempotent, idempotent) and two criteria (a runtime checker,
    required; a subjective one, optional)."""
    values: dict[str, Any] = {
        "project_id": PROJECT,
        "long_task_id": task_id,
        "owner_id": OWNER,
        "goal": "send the weekly report to the team",
        "constraints": ["no attachments over 5 MB"],
        "steps": [
            lt.StepDraft(
                step_id="s1",
                title="write the report",
                side_effect=lt.SIDE_EFFECT_CLASS_PURE,
                action=struct(run="make report.md", receipt="none"),
            ),
            lt.StepDraft(
                step_id="s2",
                title="send the email",
                side_effect=lt.SIDE_EFFECT_CLASS_NON_IDEMPOTENT,
            ),
            lt.StepDraft(
                step_id="s3",
                title="archive it",
                side_effect=lt.SIDE_EFFECT_CLASS_IDEMPOTENT,
                idempotency_key="archive-1",
            ),
        ],
        "criteria": [
            lt.CriterionDraft(
                criterion_id="c1",
                text="the report file exists",
                checker_kind="file_exists",
                checker=struct(path="report.md"),
            ),
            lt.CriterionDraft(criterion_id="c2", text="the report reads well", optional=True),
        ],
    }
    values.update(overrides)
    return lt.LongTaskDraft(**values)


async def create(stack: LongTaskStack, start: bool = False, **overrides: Any) -> lt.LongTask:
    request = lt.CreateLongTaskRequest(long_task=draft(**overrides), start=start)
    return await stack.tasks.CreateLongTask(request)


async def get(stack: LongTaskStack, task_id: str = "lt-1") -> lt.LongTask:
    return await stack.tasks.GetLongTask(
        lt.GetLongTaskRequest(project_id=PROJECT, long_task_id=task_id)
    )


async def refused(
    call: Callable[[], Awaitable[Any]] | Awaitable[Any],
) -> tuple[grpc.StatusCode, str]:
    """The code and ErrorInfo reason of a call that must fail (a call, or what makes one)."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await (call() if callable(call) else call)
    return error.value.code(), error_info(error.value).reason


async def running(stack: LongTaskStack) -> LiveAttempt:
    await create(stack, start=True)
    return await start_attempt(stack, "lt-1", OWNER)


def step_of(task: lt.LongTask | lt.Briefing, step_id: str) -> lt.LongTaskStep:
    return next(s for s in task.steps if s.step_id == step_id)
