"""The one action contract and short handles through real gRPC on loopback, on SQLite and
PostgreSQL (docs/long-tasks.md "One action contract and short handles"): handles unique and
stable per owner under concurrent creates, never given twice; Act exactly once by action id
through the door's own methods; a stale etag or another owner's handle changes nothing; the
text command refuses to guess among several open decisions and acts on one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from truerun.v1 import long_task_service_pb2 as lt

from tests.support.longtask_api import OWNER, PROJECT, create, get, refused, struct
from tests.support.longtask_stack import (
    LiveAttempt,
    LongTaskStack,
    longtask_stack,
    start_attempt,
)
from tests.support.longtasks import snapshot


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


def act(**fields: str) -> lt.ActRequest:
    return lt.ActRequest(project_id=PROJECT, owner_id=OWNER, **fields)


def text(message: str, action_id: str = "", owner: str = OWNER) -> lt.TextCommandRequest:
    return lt.TextCommandRequest(
        project_id=PROJECT, owner_id=owner, text=message, action_id=action_id
    )


async def asking(stack: LongTaskStack, task_id: str, question: str) -> LiveAttempt:
    """A task of alice's whose attempt asked her a question (the task waits for her)."""
    await create(stack, start=True, long_task_id=task_id)
    live = await start_attempt(stack, task_id, OWNER)
    await stack.attempts.RequestDecision(
        lt.RequestDecisionRequest(
            credential=live.credential, question=question, options=["team", "leads"]
        )
    )
    return live


async def test_handles_numbered_per_owner_and_never_given_twice(stack: LongTaskStack) -> None:
    first = await create(stack, long_task_id="a1")
    second = await create(stack, long_task_id="a2")
    beas = await create(stack, long_task_id="b1", owner_id="bea")
    assert (first.handle, second.handle, beas.handle) == ("#1", "#2", "#1")
    cancelled = await stack.tasks.Act(act(task="#1", action="cancel", action_id="m-1"))
    assert cancelled.long_task.state == lt.LONG_TASK_STATE_CANCELLED
    assert cancelled.long_task.handle == "#1"  # stable: the finished task keeps it
    third = await create(stack, long_task_id="a3")
    assert third.handle == "#3"  # never reused: an old "#1" can only name a1
    assert (await get(stack, "a2")).handle == "#2"
    listed = await stack.tasks.ListLongTasks(lt.ListLongTasksRequest(project_id=PROJECT))
    assert {t.long_task_id: t.handle for t in listed.long_tasks} == {
        "a1": "#1",
        "a2": "#2",
        "a3": "#3",
        "b1": "#1",
    }


async def test_concurrent_creates_take_distinct_handles(stack: LongTaskStack) -> None:
    created = await asyncio.gather(
        *(create(stack, long_task_id=f"c{n}") for n in range(8)),
        *(create(stack, long_task_id=f"d{n}", owner_id="dan") for n in range(4)),
    )
    alices = sorted(int(t.handle[1:]) for t in created if t.owner_id == OWNER)
    dans = sorted(int(t.handle[1:]) for t in created if t.owner_id == "dan")
    assert alices == list(range(1, 9)) and dans == [1, 2, 3, 4]
    for task in created:  # stable: read again, each has the handle it was created with
        assert (await get(stack, task.long_task_id)).handle == task.handle


async def test_act_by_handle_once_per_action_id(stack: LongTaskStack) -> None:
    planned = await create(stack, start=True)
    request = act(task="#1", action="pause", action_id="msg-42", etag=planned.etag, note="lunch")
    first = await stack.tasks.Act(request)
    assert first.outcome == "done" and first.long_task.state == lt.LONG_TASK_STATE_PAUSED
    assert first.action_etag == first.long_task.etag == "3"
    before = await snapshot(stack.app.store)
    again = await stack.tasks.Act(request)  # a redelivery: the stale etag is no matter
    assert again.outcome == "already_done" and again.action_etag == "3"
    assert await snapshot(stack.app.store) == before
    # by id as well, and the same id for another action is refused, not taken as a repeat
    resumed = await stack.tasks.Act(act(task="lt-1", action="resume", action_id="msg-43", etag="3"))
    assert resumed.outcome == "done" and resumed.long_task.state == lt.LONG_TASK_STATE_QUEUED
    reused = act(task="#1", action="cancel", action_id="msg-42", etag=resumed.long_task.etag)
    assert await refused(stack.tasks.Act(reused)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "REQUEST_ID_REUSED",
    )
    assert (await get(stack)).state == lt.LONG_TASK_STATE_QUEUED


async def test_concurrent_repeats_act_once(stack: LongTaskStack) -> None:
    await create(stack, start=True)
    request = act(task="#1", action="cancel", action_id="tap-1")
    answers = await asyncio.gather(*(stack.tasks.Act(request) for _ in range(5)))
    assert sorted(a.outcome for a in answers) == ["already_done"] * 4 + ["done"]
    events = await stack.tasks.ListLongTaskEvents(
        lt.ListLongTaskEventsRequest(project_id=PROJECT, long_task_id="lt-1")
    )
    assert [e.type for e in events.events].count("cancel") == 1


async def test_stale_etag_changes_nothing(stack: LongTaskStack) -> None:
    await create(stack, start=True)
    before = await snapshot(stack.app.store)
    stale = act(task="#1", action="pause", action_id="old-card", etag="1")
    assert await refused(stack.tasks.Act(stale)) == (
        grpc.StatusCode.ABORTED,
        "LONG_TASK_VERSION_CONFLICT",
    )
    assert await snapshot(stack.app.store) == before  # no action id kept either
    replied = await stack.tasks.TextCommand(text("/longtask pause #1 1", "chat-7"))
    assert replied.refusal == "LONG_TASK_VERSION_CONFLICT" and replied.outcome == ""
    assert await snapshot(stack.app.store) == before


async def test_another_owners_handle_is_refused_by_authorization(stack: LongTaskStack) -> None:
    """Bob's token sees project "elsewhere" only; alice's #1 is in "proj". Guessing "#1" is
    easy: what refuses him is the project, exactly as a task id would be refused."""
    await create(stack, start=True)
    before = await snapshot(stack.app.store)
    guesses = [
        lt.ActRequest(project_id=PROJECT, owner_id=OWNER, task="#1", action="cancel"),
        lt.ActRequest(project_id="elsewhere", owner_id=OWNER, task="#1", action="cancel"),
        lt.ActRequest(project_id="elsewhere", owner_id=OWNER, task="lt-1", action="cancel"),
        lt.ActRequest(project_id=PROJECT, owner_id=OWNER, task="lt-1", action="cancel"),
    ]
    for guess in guesses:
        guess.action_id = "guess"
        assert await refused(stack.bobs.Act(guess)) == (
            grpc.StatusCode.NOT_FOUND,
            "LONG_TASK_NOT_FOUND",
        )
    # bob's own handles are his (his token's name): "#1" without an owner is not alice's
    mine = lt.ActRequest(project_id="elsewhere", task="#1", action="cancel", action_id="g2")
    assert await refused(stack.bobs.Act(mine)) == (
        grpc.StatusCode.NOT_FOUND,
        "LONG_TASK_NOT_FOUND",
    )
    chat = await refused(stack.bobs.TextCommand(text("/longtask cancel #1", "g3")))
    assert chat == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
    elsewhere = lt.TextCommandRequest(
        project_id="elsewhere", owner_id=OWNER, text="/longtask cancel #1", action_id="g4"
    )
    # naming alice as the writer is acting for her: bob's token does not (docs/tenancy.md)
    assert await refused(stack.bobs.TextCommand(elsewhere)) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "OWNER_NOT_PERMITTED",
    )
    assert await snapshot(stack.app.store) == before
    done = await stack.tasks.Act(act(task="#1", action="cancel", action_id="real"))
    assert done.long_task.state == lt.LONG_TASK_STATE_CANCELLED  # who sees the project may


async def test_text_command_refuses_to_guess_and_acts_on_one(stack: LongTaskStack) -> None:
    await asking(stack, "q1", "Send to the whole team or only the leads?")
    await asking(stack, "q2", "Which subject line?")
    shown = await get(stack, "q1")
    assert shown.handle == "#1" and shown.decisions[0].prompt.startswith("#1 asks (question)")
    assert "/longtask answer #1 v" in shown.decisions[0].prompt
    before = await snapshot(stack.app.store)
    ambiguous = await stack.tasks.TextCommand(text("team", "chat-1"))
    assert ambiguous.refusal == "AMBIGUOUS_SHORT_ANSWER" and ambiguous.outcome == ""
    assert "#1 asks" in ambiguous.reply and "#2 asks" in ambiguous.reply
    assert await snapshot(stack.app.store) == before

    named = await stack.tasks.TextCommand(text("/longtask answer #1 team", "chat-2"))
    assert named.outcome == "done" and named.long_task.long_task_id == "q1"
    assert named.long_task.decisions[0].answer == "team"
    assert named.long_task.state == lt.LONG_TASK_STATE_QUEUED
    # one decision open now: a short answer goes to it
    short = await stack.tasks.TextCommand(text("leads", "chat-3"))
    assert short.outcome == "done" and short.long_task.long_task_id == "q2"
    assert short.long_task.decisions[0].answer == "leads"
    redelivered = await stack.tasks.TextCommand(text("leads", "chat-3"))
    assert redelivered.outcome == "already_done" and redelivered.reply.startswith("#2")
    unasked = await stack.tasks.TextCommand(text("leads", "chat-4"))
    assert unasked.outcome == "" and "Nothing of yours" in unasked.reply
    again = await stack.tasks.TextCommand(text("/longtask answer #1 team", "chat-2"))
    assert again.outcome == "already_done"
    listing = await stack.tasks.TextCommand(text("/longtask list"))
    assert "#1 queued" in listing.reply and "#2 queued" in listing.reply


async def test_short_yes_grants_the_one_open_approval(stack: LongTaskStack) -> None:
    await create(stack, start=True)
    live = await start_attempt(stack, "lt-1", OWNER)
    await stack.attempts.RequestApproval(
        lt.RequestApprovalRequest(
            credential=live.credential,
            subject="send mail to team@example.org",
            question="May I send the report to the whole team?",
            material=struct(to="team@example.org"),
        )
    )
    asked = await get(stack)
    assert "/longtask approve #1" in asked.decisions[0].prompt
    unfit = await stack.tasks.TextCommand(text("maybe later", "chat-1"))
    assert unfit.refusal == "ANSWER_NOT_OFFERED" and unfit.outcome == ""
    granted = await stack.tasks.TextCommand(text("yes", "chat-2"))
    assert granted.outcome == "done"
    assert granted.long_task.state == lt.LONG_TASK_STATE_RUNNING
    assert granted.long_task.decisions[0].answer == "grant"
    # approve by the Act RPC with no decision id needs exactly one open approval
    none_open = act(task="#1", action="deny", action_id="tap-9")
    assert await refused(stack.tasks.Act(none_open)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_LONG_TASK_TRANSITION",
    )


async def test_bad_requests_change_nothing(stack: LongTaskStack) -> None:
    await create(stack)
    before = await snapshot(stack.app.store)
    bad = [
        act(task="#1", action="explode", action_id="x"),
        act(task="#1", action="pause", action_id=""),
        act(task="#1", action="pause", action_id="has space"),
        act(task="#1", action="pause", action_id="x", etag="soon"),
        act(task="", action="pause", action_id="x"),
    ]
    for request in bad:
        assert (await refused(stack.tasks.Act(request)))[0] == grpc.StatusCode.INVALID_ARGUMENT
    help_ = await stack.tasks.TextCommand(text("/longtask frobnicate #1"))
    assert "unknown action" in help_.reply and help_.outcome == ""
    assert await snapshot(stack.app.store) == before
