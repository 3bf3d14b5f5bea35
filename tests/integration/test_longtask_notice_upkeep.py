"""The notices' upkeep through a real server on loopback, SQLite and PostgreSQL
(docs/long-tasks.md "Notices"): a webhook URL the server does not post to is refused at
registration (NOTICE_WEBHOOK_NOT_ALLOWED, nothing registered) and, when the allow list
changed since, is not posted to (a failed try, visible in the deliveries); and notices
with their deliveries live exactly as long as their task: kept while it is unfinished
whatever its age, kept while finished within TRUERUN_LONG_TASK_RETENTION_DAYS, trimmed
with it after that, another task's left alone."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from truerun.v1 import long_task_service_pb2 as lt

from longtasks.service.notice_delivery import NoticeDelivery
from longtasks.service.webhook_guard import WebhookGuard
from reconciler.output_retention import DAY_MS
from services.bootstrap import long_task_retention, longtask_sql
from tests.support.longtask_api import OWNER, PROJECT, create, get, refused
from tests.support.longtask_stack import start_attempt
from tests.support.notice_stack import WEBHOOK_KEY, NoticeStack, notice_stack, receiver

DAYS = 90


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[NoticeStack]:
    async with notice_stack(migrated_database_url, webhook_allow="127.0.0.1") as live:
        yield live


def _at(days: int) -> int:
    return int(time.time() * 1000 + days * DAY_MS)


async def _listed(stack: NoticeStack) -> tuple[list[str], list[str]]:
    """The owner's notices' task ids and their deliveries' notice ids."""
    api = stack.live.tasks
    notices = (await api.ListNotices(lt.ListNoticesRequest(project_id=PROJECT))).notices
    deliveries = (
        await api.ListNoticeDeliveries(lt.ListNoticeDeliveriesRequest(project_id=PROJECT))
    ).deliveries
    ids = {n.notice_id: n.long_task_id for n in notices}
    return [n.long_task_id for n in notices], [ids.get(d.notice_id, "?") for d in deliveries]


async def _ask(stack: NoticeStack, task_id: str) -> None:
    live = stack.live
    await create(live, start=True, task_id=task_id)
    attempt = await start_attempt(live, task_id, OWNER)
    await live.attempts.RequestApproval(
        lt.RequestApprovalRequest(credential=attempt.credential, subject="s", question="May I?")
    )
    await attempt.runtime.close()


async def test_a_webhook_url_is_checked_at_registration_and_before_every_post(
    stack: NoticeStack,
) -> None:
    api = stack.live.tasks
    for url in (
        "http://169.254.169.254/latest/meta-data/",  # metadata: refused whatever the list
        "https://hooks.example.com/x",  # not in the list
        "http://localhost:9/x",  # the list names the address, not this name
    ):
        code, reason = await refused(
            api.RegisterNoticeWebhook(lt.RegisterNoticeWebhookRequest(project_id=PROJECT, url=url))
        )
        assert (code.name, reason) == ("INVALID_ARGUMENT", "NOTICE_WEBHOOK_NOT_ALLOWED"), url
    with receiver(200) as hook:
        await api.RegisterNoticeWebhook(
            lt.RegisterNoticeWebhookRequest(project_id=PROJECT, url=hook.url())
        )
        await _ask(stack, "lt-1")
        assert (await _listed(stack))[1] == ["lt-1"]  # one delivery: only the allowed hook

        def sender(allow: str) -> NoticeDelivery:
            sql = longtask_sql(stack.live.app.store)
            key = WEBHOOK_KEY.encode()
            guard = WebhookGuard(allow)
            return NoticeDelivery(
                stack.live.app.transitions, sql, key, retry_base_ms=1, guard=guard
            )

        # the list changed since the registration: not posted, a failed try that says why
        assert await sender("hooks.example.com").run_once() == {
            "delivered": 0,
            "retry": 1,
            "dead": 0,
        }
        assert hook.received == []
        [delivery] = (
            await api.ListNoticeDeliveries(lt.ListNoticeDeliveriesRequest(project_id=PROJECT))
        ).deliveries
        assert delivery.state == "pending" and delivery.tries == 1
        assert "not in TRUERUN_NOTICE_WEBHOOK_ALLOW" in delivery.last_error
        # allowed again: posted
        deadline = time.monotonic() + 10
        while not hook.received:
            await sender("127.0.0.1").run_once()
            assert time.monotonic() < deadline
        assert len(hook.received) == 1


async def test_notices_and_deliveries_are_trimmed_with_their_task_only(
    stack: NoticeStack,
) -> None:
    api = stack.live.tasks
    with receiver(200) as hook:
        await api.RegisterNoticeWebhook(
            lt.RegisterNoticeWebhookRequest(project_id=PROJECT, url=hook.url())
        )
        await _ask(stack, "lt-1")
        await _ask(stack, "lt-2")
    both = (["lt-1", "lt-2"], ["lt-1", "lt-2"])
    assert await _listed(stack) == both
    # unfinished, a year on: nothing goes
    assert await long_task_retention(stack.live.app, DAYS, clock=lambda: _at(365)).run_once() == 0
    assert await _listed(stack) == both

    task = await get(stack.live, "lt-1")
    await api.CancelLongTask(
        lt.CancelLongTaskRequest(project_id=PROJECT, long_task_id="lt-1", etag=task.etag)
    )
    # finished, within the period: kept
    assert (
        await long_task_retention(stack.live.app, DAYS, clock=lambda: _at(DAYS - 1)).run_once() == 0
    )
    assert await _listed(stack) == both
    # past it: lt-1's notice and delivery go with its trim; lt-2 (unfinished) keeps its own
    assert (
        await long_task_retention(stack.live.app, DAYS, clock=lambda: _at(DAYS + 1)).run_once() == 1
    )
    assert await _listed(stack) == (["lt-2"], ["lt-2"])
    trimmed = await api.ListLongTaskEvents(
        lt.ListLongTaskEventsRequest(project_id=PROJECT, long_task_id="lt-1")
    )
    assert "1 notices with their deliveries" in trimmed.events[-1].message
