"""A long task's notices shown on its source reference, through the public API of a real
server on loopback, SQLite and PostgreSQL (docs/long-tasks.md "Notices"; issue #14 item 5:
"the request is shown where the person is ... never only inside the attempt").

An ordinary run is promoted into a long task (its run is the task's first attempt); the
attempt asks twice for the same permission. Whoever watches the run reads each request in
the run's own events (RunService ListRunEvents, a ``long_task.notice`` event) with the same
prompt, command and repeat count as the notice ListNotices gives; the second says "2nd
request for the same permission" on both. A task created explicitly with a ``source_ref``
keeps it and carries it on its notices."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import run_service_pb2 as rs

from tests.integration.test_longtask_activation import ordinary_run
from tests.support.longtask_api import OWNER, PROJECT, create, get, refused
from tests.support.longtask_stack import LongTaskStack, start_attempt
from tests.support.notice_stack import notice_stack
from truerun_runtime.longtask import PROMOTED, Request, ToolCall

NON_IDEMPOTENT = lt.SIDE_EFFECT_CLASS_NON_IDEMPOTENT
SECOND = "2nd request for the same permission"


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    """The owner's token is a person's (``tasks``): ListNotices answers their own."""
    async with notice_stack(migrated_database_url) as live:
        yield live.live


async def notices_on_run(stack: LongTaskStack, run_id: str) -> list[dict[str, Any]]:
    listed = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))
    return [dict(e.payload) for e in listed.events if e.type == "long_task.notice"]


async def notices(stack: LongTaskStack) -> list[lt.Notice]:
    listed = await stack.tasks.ListNotices(lt.ListNoticesRequest(project_id=PROJECT))
    return list(listed.notices)


async def test_an_approval_inside_a_promoted_task_is_shown_on_its_source_run(
    stack: LongTaskStack,
) -> None:
    run = await ordinary_run(stack, "mail")
    send = ToolCall("send", "send the mail", "non_idempotent", "team@example", "send it")
    async with run.activation(stack, Request("Send the mail every morning")) as a:
        task_id = await a.begin(
            plan=[lt.StepDraft(step_id="send", title="send", side_effect=NON_IDEMPOTENT)]
        )
        assert await a.before_tool(send) == PROMOTED
    task = await get(stack, task_id)
    assert task.source_run_id == run.run_id and task.source_ref == ""
    assert await notices_on_run(stack, run.run_id) == []  # a promotion is no notice

    for n in (1, 2):
        await stack.attempts.RequestApproval(
            lt.RequestApprovalRequest(
                credential=run.credential, subject="send:team", question="May I send it?"
            )
        )
        task = await get(stack, task_id)
        [pending] = [d for d in task.decisions if d.state == "open"]
        notice = (await notices(stack))[-1]
        shown = (await notices_on_run(stack, run.run_id))[-1]
        assert pending.repeat_count == n and notice.kind == "approval"
        assert notice.source_run_id == run.run_id
        # the run's event says what the notice says: the prompt, the command, the count
        assert (shown["kind"], shown["title"], shown["text"]) == (
            notice.kind,
            notice.title,
            notice.text,
        )
        assert shown["long_task_id"] == task_id and shown["handle"] == notice.handle
        assert (
            shown["command"]
            == notice.command
            == f"/longtask approve {notice.handle} "
            + (f"{task.etag} or /longtask deny {notice.handle} {task.etag}")
        )
        assert pending.prompt in shown["text"] and pending.prompt in notice.text
        assert (SECOND in shown["title"]) == (SECOND in notice.title) == (n == 2)
        if n == 2:
            assert "[request 2 for the same permission]" in shown["text"]
        replied = await stack.tasks.TextCommand(
            lt.TextCommandRequest(
                project_id=PROJECT,
                owner_id=OWNER,
                text=f"/longtask approve {notice.handle} {task.etag}",
                action_id=f"approve-{n}",
            )
        )
        assert replied.outcome == "done", replied.reply
    assert len(await notices_on_run(stack, run.run_id)) == 2  # answering is no notice


async def test_a_source_ref_given_at_create_is_kept_and_carried_by_notices(
    stack: LongTaskStack,
) -> None:
    thread = "https://chat.example/threads/42"
    created = await create(stack, start=True, source_ref=thread)
    assert created.source_ref == thread and created.source_run_id == ""
    live = await start_attempt(stack, "lt-1", OWNER)
    await stack.attempts.RequestApproval(
        lt.RequestApprovalRequest(credential=live.credential, subject="s", question="May I?")
    )
    [notice] = await notices(stack)
    assert notice.source_ref == thread and notice.source_run_id == ""
    # shown on the attempt's own run too (the run someone watching the attempt sees)
    [shown] = await notices_on_run(stack, live.start.run_id)
    assert shown["title"] == notice.title and shown["command"] == notice.command
    # a reference with a secret in it is refused, and nothing is created
    code, _ = await refused(
        create(stack, task_id="lt-2", source_ref="https://x.example/?token=abcdef0123456789")
    )
    assert code.name == "INVALID_ARGUMENT"
    assert (
        len(
            (
                await stack.tasks.ListLongTasks(lt.ListLongTasksRequest(project_id=PROJECT))
            ).long_tasks
        )
        == 1
    )
