"""LongTaskService through real gRPC on loopback, on SQLite and PostgreSQL
(docs/long-tasks.md "API"): a person's commands with the task's etag, as the caller of the
bearer token, only in projects the token sees. Refusals carry their stable reason and
change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from truerun.v1 import long_task_service_pb2 as lt

from tests.support.longtask_api import (
    OWNER,
    PROJECT,
    create,
    draft,
    get,
    refused,
)
from tests.support.longtask_stack import (
    LongTaskStack,
    longtask_stack,
)
from tests.support.longtasks import snapshot


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


async def test_create_get_and_list(stack: LongTaskStack) -> None:
    planned = await create(stack)
    assert planned.state == lt.LONG_TASK_STATE_PLANNED and planned.etag == "1"
    assert planned.name == "projects/proj/longTasks/lt-1" and planned.created_by == "tester"
    assert [s.step_id for s in planned.steps] == ["s1", "s2", "s3"]
    assert [s.state for s in planned.steps] == [lt.STEP_STATE_PENDING] * 3
    assert planned.steps[0].action["run"] == "make report.md"
    assert planned.steps[2].idempotency_key == "archive-1"
    assert [(c.criterion_id, c.required, c.subjective) for c in planned.criteria] == [
        ("c1", True, False),
        ("c2", False, True),
    ]
    assert planned.criteria[0].checker["path"] == "report.md"
    assert list(planned.constraints) == ["no attachments over 5 MB"]
    assert [p.version for p in planned.plan_versions] == [1]
    queued = await create(stack, start=True, long_task_id="lt-2", owner_id="bea")
    assert queued.state == lt.LONG_TASK_STATE_QUEUED and queued.display_state == "queued"
    assert (await get(stack)) == planned

    listed = await stack.tasks.ListLongTasks(lt.ListLongTasksRequest(project_id=PROJECT))
    assert [t.long_task_id for t in listed.long_tasks] == ["lt-2", "lt-1"]
    assert not listed.long_tasks[0].steps and listed.next_page_token == ""
    first = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, page_size=1)
    )
    rest = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, page_size=1, page_token=first.next_page_token)
    )
    assert [t.long_task_id for t in [*first.long_tasks, *rest.long_tasks]] == ["lt-2", "lt-1"]
    assert rest.next_page_token == ""
    alices = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, owner_id=OWNER)
    )
    assert [t.long_task_id for t in alices.long_tasks] == ["lt-1"]
    cancelled = await stack.tasks.CancelLongTask(
        lt.CancelLongTaskRequest(project_id=PROJECT, long_task_id="lt-2", etag=queued.etag)
    )
    assert cancelled.state == lt.LONG_TASK_STATE_CANCELLED
    active = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, active_only=True)
    )
    assert [t.long_task_id for t in active.long_tasks] == ["lt-1"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": []}, "at least one step"),
        ({"steps": [lt.StepDraft(step_id="a", title="t")]}, "side_effect is required"),
        (
            {
                "steps": [
                    lt.StepDraft(step_id="a", title="t", side_effect=lt.SIDE_EFFECT_CLASS_PURE),
                    lt.StepDraft(step_id="a", title="u", side_effect=lt.SIDE_EFFECT_CLASS_PURE),
                ]
            },
            "given twice: a",
        ),
        ({"goal": ""}, "goal is required"),
        ({"goal": "g" * 9000}, "goal is longer"),
        (
            {"criteria": [lt.CriterionDraft(criterion_id="c", text="t", checker_kind="magic")]},
            "unknown checker",
        ),
    ],
)
async def test_a_malformed_task_is_refused_and_nothing_is_written(
    stack: LongTaskStack, change: dict[str, Any], message: str
) -> None:
    before = await snapshot(stack.app.store)
    request = lt.CreateLongTaskRequest(long_task=draft(**change), start=True)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stack.tasks.CreateLongTask(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (error.value.details() or "")
    assert await snapshot(stack.app.store) == before


async def test_a_stale_etag_is_a_version_conflict_and_changes_nothing(
    stack: LongTaskStack,
) -> None:
    planned = await create(stack)
    started = await stack.tasks.StartLongTask(
        lt.StartLongTaskRequest(project_id=PROJECT, long_task_id="lt-1", etag=planned.etag)
    )
    assert started.state == lt.LONG_TASK_STATE_QUEUED and started.etag != planned.etag
    before = await snapshot(stack.app.store)
    named: dict[str, Any] = {"project_id": PROJECT, "long_task_id": "lt-1", "etag": planned.etag}
    for call in (
        lambda: stack.tasks.PauseLongTask(lt.PauseLongTaskRequest(**named)),
        lambda: stack.tasks.CancelLongTask(lt.CancelLongTaskRequest(**named)),
        lambda: stack.tasks.RevisePlan(lt.RevisePlanRequest(**named, reason="r")),
        lambda: stack.tasks.EditCriterion(
            lt.EditCriterionRequest(**named, criterion_id="c1", waive=True)
        ),
    ):
        assert await refused(call) == (grpc.StatusCode.ABORTED, "LONG_TASK_VERSION_CONFLICT")
    assert await snapshot(stack.app.store) == before


async def test_another_projects_caller_finds_nothing_and_changes_nothing(
    stack: LongTaskStack,
) -> None:
    planned = await create(stack)
    before = await snapshot(stack.app.store)
    named = {"project_id": PROJECT, "long_task_id": "lt-1"}
    for call in (
        lambda: stack.bobs.GetLongTask(lt.GetLongTaskRequest(**named)),
        lambda: stack.bobs.StartLongTask(lt.StartLongTaskRequest(**named, etag=planned.etag)),
        lambda: stack.bobs.ExportLongTask(
            lt.ExportLongTaskRequest(project_id=PROJECT, long_task_id="lt-1")
        ),
        # the task's id under a project the caller does see is no task either
        lambda: stack.tasks.GetLongTask(
            lt.GetLongTaskRequest(project_id="elsewhere", long_task_id="lt-1")
        ),
    ):
        assert await refused(call) == (grpc.StatusCode.NOT_FOUND, "LONG_TASK_NOT_FOUND")
    assert await snapshot(stack.app.store) == before


async def test_a_queued_task_shows_its_place_in_its_owners_queue(stack: LongTaskStack) -> None:
    first = await create(stack, start=True, long_task_id="q-1", owner_id="bea")
    await create(stack, start=True, long_task_id="other", owner_id="cy")
    second = await create(stack, start=True, long_task_id="q-2", owner_id="bea")
    planned = await create(stack, long_task_id="q-3", owner_id="bea")
    assert (first.queue_position, second.queue_position) == (0, 1)
    assert planned.queue_position == 0 and planned.state == lt.LONG_TASK_STATE_PLANNED
    listed = await stack.tasks.ListLongTasks(
        lt.ListLongTasksRequest(project_id=PROJECT, owner_id="bea")
    )
    assert [(t.long_task_id, t.queue_position) for t in listed.long_tasks] == [
        ("q-3", 0),
        ("q-2", 1),
        ("q-1", 0),
    ]
    await stack.tasks.PauseLongTask(
        lt.PauseLongTaskRequest(project_id=PROJECT, long_task_id="q-1", etag=first.etag)
    )
    assert (await get(stack, "q-2")).queue_position == 0


async def test_a_plan_revision_and_resume_through_the_api(stack: LongTaskStack) -> None:
    planned = await create(stack)
    named: dict[str, Any] = {"project_id": PROJECT, "long_task_id": "lt-1"}
    revised = await stack.tasks.RevisePlan(
        lt.RevisePlanRequest(
            **named,
            etag=planned.etag,
            reason="the archive is not needed",
            author="model",
            steps=[draft().steps[0], draft().steps[1]],
        )
    )
    assert revised.plan_version == 2 and [s.step_id for s in revised.steps] == ["s1", "s2"]
    assert [(p.version, p.author, p.closed_state) for p in revised.plan_versions] == [
        (1, "user", "planned"),
        (2, "model", ""),
    ]
    wrong = lt.RevisePlanRequest(**named, etag=revised.etag, reason="r", author="robot")
    assert (await refused(stack.tasks.RevisePlan(wrong)))[1] == "INVALID_ARGUMENT"
    started = await stack.tasks.StartLongTask(lt.StartLongTaskRequest(**named, etag=revised.etag))
    paused = await stack.tasks.PauseLongTask(
        lt.PauseLongTaskRequest(**named, etag=started.etag, note="holiday")
    )
    assert paused.state == lt.LONG_TASK_STATE_PAUSED
    resumed = await stack.tasks.ResumeLongTask(lt.ResumeLongTaskRequest(**named, etag=paused.etag))
    assert resumed.state == lt.LONG_TASK_STATE_QUEUED
    events = await stack.tasks.ListLongTaskEvents(
        lt.ListLongTaskEventsRequest(**named, after_sequence=1, page_size=2)
    )
    assert [e.sequence for e in events.events] == [2, 3]
    assert all(e.actor_id == "tester" and e.actor_type == "user" for e in events.events)


async def test_editing_a_criterion_is_a_users_plan_version(stack: LongTaskStack) -> None:
    planned = await create(stack)
    named: dict[str, Any] = {"project_id": PROJECT, "long_task_id": "lt-1"}
    both = lt.EditCriterionRequest(
        **named, etag=planned.etag, criterion_id="c1", waive=True, text="x"
    )
    assert (await refused(lambda: stack.tasks.EditCriterion(both)))[1] == "INVALID_ARGUMENT"
    waived = await stack.tasks.EditCriterion(
        lt.EditCriterionRequest(**named, etag=planned.etag, criterion_id="c1", waive=True)
    )
    assert waived.plan_version == 2
    c1, c2 = waived.criteria
    assert (c1.required, c1.author, c1.user_edited) == (False, "user", True)
    assert (c2.text, c2.required) == ("the report reads well", False)
    assert waived.plan_versions[-1].reason == "criterion c1 waived"
    reworded = await stack.tasks.EditCriterion(
        lt.EditCriterionRequest(
            **named, etag=waived.etag, criterion_id="c2", text="a colleague approves it"
        )
    )
    assert reworded.criteria[1].text == "a colleague approves it"
    assert reworded.criteria[1].user_edited and reworded.plan_version == 3


async def test_an_owner_past_the_unfinished_cap_creates_nothing(
    migrated_database_url: str,
) -> None:
    async with longtask_stack(migrated_database_url, max_unfinished=2) as capped:
        first = await create(capped, long_task_id="a-1")
        await create(capped, long_task_id="a-2", start=True)
        await create(capped, long_task_id="b-1", owner_id="bea")  # another owner's count
        before = await snapshot(capped.app.store)
        code, reason = await refused(create(capped, long_task_id="a-3"))
        assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LONG_TASK_LIMIT_REACHED")
        assert await snapshot(capped.app.store) == before
        await capped.tasks.CancelLongTask(
            lt.CancelLongTaskRequest(project_id=PROJECT, long_task_id="a-1", etag=first.etag)
        )
        again = await create(capped, long_task_id="a-3")  # a finished task frees its place
        assert again.state == lt.LONG_TASK_STATE_PLANNED


async def test_a_cancelled_task_never_continues_and_recovery_needs_an_interruption(
    stack: LongTaskStack,
) -> None:
    named: dict[str, Any] = {"project_id": PROJECT, "long_task_id": "lt-1"}
    planned = await create(stack)
    not_interrupted = lt.ClearRecoveryRequest(**named, etag=planned.etag)
    assert await refused(stack.tasks.ClearRecovery(not_interrupted)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_LONG_TASK_TRANSITION",
    )
    cancelled = await stack.tasks.CancelLongTask(
        lt.CancelLongTaskRequest(**named, etag=planned.etag)
    )
    again = lt.ContinueLongTaskRequest(**named, etag=cancelled.etag, reason="one more time")
    assert await refused(stack.tasks.ContinueLongTask(again)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_LONG_TASK_TRANSITION",
    )
