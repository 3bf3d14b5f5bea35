"""LongTaskService's notice RPCs (docs/long-tasks.md "Notices"), mixed into the servicer
(people.py): an owner's notices, their deliveries' state, and a webhook subscription. The
caller must see the project and act for the owner (docs/tenancy.md): a person's token
reads its own notices (another owner's are refused, ``NOTICES_OF_ANOTHER_OWNER``), an app's
token names the owner it acts for (like TextCommand), an operator's may name anyone."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

import grpc
from truerun.v1 import long_task_service_pb2 as pb

from coordinator.api import validation
from coordinator.api.auth import caller
from coordinator.api.convert import timestamp
from coordinator.api.errors import unary
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from kernel.errors import (
    InvalidArgument,
    NoticesOfAnotherOwner,
    NoticeWebhookInvalid,
    PermissionDenied,
)
from longtasks.service.notices import NoticeDesk
from longtasks.store.notice_sql import Delivery, StoredNotice

Ctx = grpc.aio.ServicerContext[Any, Any]
DEFAULT_PAGE = 100
MAX_PAGE = 500


def cursor_of(notice: StoredNotice) -> str:
    raw = f"{notice.created_at_ms}\0{notice.id}".encode()
    return base64.urlsafe_b64encode(raw).decode()


def _after(cursor: str) -> tuple[int, str]:
    if not cursor:
        return (-1, "")
    try:
        at, notice_id = base64.urlsafe_b64decode(cursor).decode().split("\0")
        return int(at), notice_id
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument("after_cursor is not one this server issued") from None


def _size(page_size: int) -> int:
    if page_size < 0:
        raise InvalidArgument("page_size must not be negative")
    return min(page_size or DEFAULT_PAGE, MAX_PAGE)


def notice_to_proto(notice: StoredNotice) -> pb.Notice:
    return pb.Notice(
        notice_id=notice.id,
        kind=notice.kind,
        project_id=notice.project_id,
        owner_id=notice.owner_id,
        long_task_id=notice.task_id,
        handle=f"#{notice.handle}",
        decision_id=notice.decision_id or "",
        task_state=notice.task_state,
        etag=str(notice.task_version),
        title=notice.title,
        text=notice.text,
        create_time=timestamp(notice.created_at_ms),
        cursor=cursor_of(notice),
        source_run_id=notice.source_run_id or "",
        source_ref=notice.source_ref,
        command=notice.command,
    )


def delivery_to_proto(delivery: Delivery) -> pb.NoticeDelivery:
    answer = pb.NoticeDelivery(
        delivery_id=delivery.id,
        notice_id=delivery.notice_id,
        webhook_id=delivery.webhook_id,
        state=delivery.state,
        tries=delivery.tries,
        last_status=delivery.last_status or 0,
        last_error=delivery.last_error,
    )
    if delivery.state == "pending":
        answer.next_time.CopyFrom(timestamp(delivery.next_at_ms))
    if delivery.delivered_at_ms is not None:
        answer.deliver_time.CopyFrom(timestamp(delivery.delivered_at_ms))
    return answer


def notices_owner(project_id: str, owner_id: str) -> tuple[str, str]:
    """The project and owner whose notices the caller may read, or refused."""
    project = validation.name(project_id, "project_id") or ""
    owner = validation.name(owner_id, "owner_id", required=False) or ""
    who = caller()
    if not who.sees(project):
        raise PermissionDenied(f"this token does not see project {project}")
    if who.named:
        owner = owner or who.name
    if owner and not who.acts_for(owner):  # the owners of the token (docs/tenancy.md)
        raise NoticesOfAnotherOwner(
            f"{who.name} may not read {owner}'s notices (another owner's need an operator "
            "token of the project)",
            owner_id=owner,
        )
    if not owner:
        raise InvalidArgument("owner_id is required: whose notices (an app's token names one)")
    return project, owner


def webhook_url(url: str) -> str:
    parts = urlsplit(url)
    if len(url) > 2048 or parts.scheme not in ("http", "https") or not parts.hostname:
        raise NoticeWebhookInvalid("url must be an absolute http or https URL", field="url")
    return url


class NoticeRpcs:
    """``ListNotices``, ``RegisterNoticeWebhook`` and ``ListNoticeDeliveries``."""

    _notices: NoticeDesk | None = None

    def _desk(self) -> NoticeDesk:
        if self._notices is None:
            raise NoticeWebhookInvalid("notices are not served by this server")
        return self._notices

    @unary
    async def ListNotices(
        self, request: pb.ListNoticesRequest, context: Ctx
    ) -> pb.ListNoticesResponse:
        project, owner = notices_owner(request.project_id, request.owner_id)
        after = _after(request.after_cursor)
        found = await self._desk().notices(project, owner, after, _size(request.page_size))
        return pb.ListNoticesResponse(
            notices=[notice_to_proto(n) for n in found],
            next_cursor=cursor_of(found[-1]) if found else request.after_cursor,
        )

    @unary
    async def RegisterNoticeWebhook(
        self, request: pb.RegisterNoticeWebhookRequest, context: Ctx
    ) -> pb.RegisterNoticeWebhookResponse:
        project, owner = notices_owner(request.project_id, request.owner_id)
        url = webhook_url(request.url)
        desk = self._desk()
        if not desk.webhooks_configured:
            raise NoticeWebhookInvalid("webhooks are not configured (TRUERUN_WEBHOOK_KEY)")
        who = caller()
        actor = Actor(ActorType.USER if who.named else ActorType.API_APP, who.name)
        webhook, secret = await desk.register(project, owner, url, actor)
        return pb.RegisterNoticeWebhookResponse(
            webhook_id=webhook.id, secret=secret, generation=webhook.generation
        )

    @unary
    async def ListNoticeDeliveries(
        self, request: pb.ListNoticeDeliveriesRequest, context: Ctx
    ) -> pb.ListNoticeDeliveriesResponse:
        project, owner = notices_owner(request.project_id, request.owner_id)
        notice = validation.name(request.notice_id, "notice_id", required=False) or ""
        found = await self._desk().deliveries(project, owner, notice, _size(request.page_size))
        return pb.ListNoticeDeliveriesResponse(deliveries=[delivery_to_proto(d) for d in found])
