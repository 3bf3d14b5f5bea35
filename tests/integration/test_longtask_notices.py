"""Notices through the public API of a real server on loopback, SQLite and PostgreSQL
(docs/long-tasks.md "Notices"; issue #14 items 5 and 6): a long task's life as its owner
sees it from elsewhere. Queued raises no notice; each approval request is one notice with
its repeat count and the text command that answers it (and answering with that very text
works); a crash whose run the run layer sees failed, seen by the watcher and by process
start at once, is one interruption notice; a question is one; the used-up budget's failed
is one terminal notice. Only the owner lists them (another person of the project and
another project are refused); the notices are posted to the owner's webhooks signed with
HMAC (verified here by a loopback receiver), retried with backoff after a 500, dead-lettered
after the last try, and the deliveries' state is in the API."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import runtime_service_pb2 as rpb

from kernel.webhook_signing import verify
from longtasks.service.notice_delivery import NoticeDelivery, post_http
from services.bootstrap import long_task_watcher, longtask_sql
from tests.support.longtask_api import OWNER, PROJECT, create, get, refused
from tests.support.longtask_stack import LiveAttempt, start_attempt
from tests.support.notice_stack import WEBHOOK_KEY, NoticeStack, Received, notice_stack, receiver


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[NoticeStack]:
    async with notice_stack(migrated_database_url) as live:
        yield live


async def notices(stack: NoticeStack) -> list[lt.Notice]:
    listed = await stack.live.tasks.ListNotices(lt.ListNoticesRequest(project_id=PROJECT))
    return list(listed.notices)


async def crash(live: LiveAttempt) -> None:
    """The attempt's process dies (SIGKILL): its runtime reports the exit, the run fails."""
    start = live.start
    await live.runtime.event(start, 1, rpb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await live.runtime.event(start, 2, rpb.RUNTIME_EVENT_TYPE_RUNNING)
    await live.runtime.event(start, 3, rpb.RUNTIME_EVENT_TYPE_FAILED, exit_code=137)
    await live.runtime.acked(start.attempt_id, 3)
    await live.runtime.close()


async def test_a_long_task_told_to_its_owner_once_per_fact_and_posted_signed(
    stack: NoticeStack,
) -> None:
    api, live = stack.live.tasks, stack.live
    with receiver(500, 200) as good, receiver(500) as bad:
        hooks = [
            await api.RegisterNoticeWebhook(
                lt.RegisterNoticeWebhookRequest(project_id=PROJECT, url=r.url())
            )
            for r in (good, bad)
        ]
        secret = hooks[0].secret
        assert secret.startswith("whsec_") and hooks[0].generation == 1

        await create(live, start=True, budget=lt.LongTaskBudget(max_tokens=5000))
        assert await notices(stack) == []  # queued raises none

        # -- approvals: the notice carries the repeat count and the command to answer ---
        first = await start_attempt(live, "lt-1", OWNER)
        for n in (1, 2):
            await live.attempts.RequestApproval(
                lt.RequestApprovalRequest(
                    credential=first.credential, subject="send:team", question="May I send it?"
                )
            )
            notice = (await notices(stack))[-1]
            assert (notice.kind, notice.handle, notice.task_state) == (
                "approval",
                "#1",
                "waiting_for_approval",
            )
            task = await get(live)
            [pending] = [d for d in task.decisions if d.state == "open"]
            assert notice.etag == task.etag and notice.decision_id == pending.decision_id
            assert pending.repeat_count == n
            assert pending.prompt and pending.prompt in notice.text  # the same words
            command = f"/longtask approve #1 {task.etag}"
            assert command in notice.text
            replied = await api.TextCommand(
                lt.TextCommandRequest(
                    project_id=PROJECT, owner_id=OWNER, text=command, action_id=f"approve-{n}"
                )
            )
            assert replied.refusal == "", replied.reply
            assert (
                replied.outcome == "done" and replied.long_task.state == lt.LONG_TASK_STATE_RUNNING
            )
        titles = [n.title for n in await notices(stack)]
        assert titles == [
            "#1 asks for your approval",
            "#1 asks for your approval (2nd request for the same permission)",
        ]

        # -- a crash: the run layer sees the run failed; the watcher and process start both
        # see the interruption; one notice
        await crash(first)
        watcher = long_task_watcher(
            live.app, "notice-test", owner_concurrency=0, metrics=stack.metrics
        )
        await asyncio.gather(watcher.run_once(), live.door.held_by_the_dead(set()))
        await live.door.held_by_the_dead(set())  # a second process start: nothing new
        interrupted = [n for n in await notices(stack) if n.kind == "interruption"]
        assert len(interrupted) == 1
        assert interrupted[0].task_state == "queued" and "was interrupted" in interrupted[0].text

        # -- a question, answered with the command its notice gives
        second = await start_attempt(live, "lt-1", OWNER)
        await live.attempts.RequestDecision(
            lt.RequestDecisionRequest(credential=second.credential, question="Which list?")
        )
        await second.runtime.close()
        asked = (await notices(stack))[-1]
        assert asked.kind == "decision" and asked.title == "#1 asks you"
        assert f"/longtask answer #1 v{asked.etag} <your answer>" in asked.text
        answer = f"/longtask answer #1 v{asked.etag} leads"
        replied = await api.TextCommand(
            lt.TextCommandRequest(
                project_id=PROJECT, owner_id=OWNER, text=answer, action_id="answer-1"
            )
        )
        assert replied.outcome == "done"

        # -- the budget used up with no step done: failed, one terminal notice
        third = await start_attempt(live, "lt-1", OWNER)
        await live.attempts.ReportUsage(
            lt.ReportUsageRequest(credential=third.credential, tokens=6000, usage_id="u-1")
        )
        await third.runtime.close()
        listed = await notices(stack)
        assert [(n.kind, n.task_state) for n in listed] == [
            ("approval", "waiting_for_approval"),
            ("approval", "waiting_for_approval"),
            ("interruption", "queued"),
            ("decision", "waiting_for_user"),
            ("terminal", "failed"),
        ]
        assert listed[-1].title == "#1 failed"
        for kind, count in (("approval", 2), ("interruption", 1), ("decision", 1), ("terminal", 1)):
            sample = stack.metrics.registry.get_sample_value(
                "truerun_long_task_notices_total", {"kind": kind}
            )
            assert sample == count

        # -- only the owner's: paging, another person, another project
        page = await api.ListNotices(lt.ListNoticesRequest(project_id=PROJECT, page_size=2))
        rest = await api.ListNotices(
            lt.ListNoticesRequest(project_id=PROJECT, after_cursor=page.next_cursor)
        )
        assert [n.notice_id for n in [*page.notices, *rest.notices]] == [
            n.notice_id for n in listed
        ]
        theirs = lt.ListNoticesRequest(project_id=PROJECT, owner_id=OWNER)
        denied = grpc.StatusCode.PERMISSION_DENIED
        assert await refused(stack.carol.ListNotices(theirs)) == (
            denied,
            "NOTICES_OF_ANOTHER_OWNER",
        )
        own = await stack.carol.ListNotices(lt.ListNoticesRequest(project_id=PROJECT))
        assert list(own.notices) == []
        assert (await refused(live.bobs.ListNotices(theirs)))[0] == denied
        assert (
            await refused(
                live.bobs.ListNoticeDeliveries(
                    lt.ListNoticeDeliveriesRequest(project_id=PROJECT, owner_id=OWNER)
                )
            )
        )[0] == denied
        assert len((await stack.operator.ListNotices(theirs)).notices) == 5

        # -- delivered to the webhooks, signed; retried after a 500; dead-lettered
        sender = NoticeDelivery(
            live.app.transitions,
            longtask_sql(live.app.store),
            WEBHOOK_KEY.encode(),
            max_tries=3,
            retry_base_ms=1,
        )
        deliveries = await until_settled(stack, sender)
        by_hook = {
            h.webhook_id: [d for d in deliveries if d.webhook_id == h.webhook_id] for h in hooks
        }
        delivered, dead = by_hook[hooks[0].webhook_id], by_hook[hooks[1].webhook_id]
        assert sorted(d.state for d in delivered) == ["delivered"] * 5
        assert sorted(d.tries for d in delivered) == [1, 1, 1, 1, 2]  # one 500, then a 200
        assert [(d.state, d.tries, d.last_status) for d in dead] == [("dead", 3, 500)] * 5
        assert len(bad.received) == 15
        accepted = [r for r in good.received if r.status == 200]
        assert sorted(json.loads(r.body)["notice"]["id"] for r in accepted) == sorted(
            n.notice_id for n in listed
        )
        for got in good.received:
            assert signed(got, secret)
            assert not signed(got, hooks[1].secret)  # each subscription its own secret


def signed(got: Received, secret: str) -> bool:
    return verify(
        secret,
        got.headers["truerun-signature"],
        got.headers["truerun-delivery"],
        got.body,
        int(time.time() * 1000),
    )


async def until_settled(stack: NoticeStack, sender: NoticeDelivery) -> list[lt.NoticeDelivery]:
    """Delivery rounds until no delivery is pending (a deadline, not a sleep)."""
    deadline = time.monotonic() + 20
    while True:
        await sender.run_once()
        listed = await stack.live.tasks.ListNoticeDeliveries(
            lt.ListNoticeDeliveriesRequest(project_id=PROJECT)
        )
        if listed.deliveries and all(d.state != "pending" for d in listed.deliveries):
            return list(listed.deliveries)
        assert time.monotonic() < deadline, [(d.state, d.tries) for d in listed.deliveries]
        await asyncio.sleep(0.01)


async def test_a_redirect_is_a_failed_try_not_a_new_target() -> None:
    with receiver(302) as moved:
        posted = await post_http(moved.url(), b"{}", {"Content-Type": "application/json"})
    assert (posted.status, posted.error) == (302, "HTTP 302")
    assert len(moved.received) == 1
