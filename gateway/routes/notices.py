"""Notices (docs/long-tasks.md "Notices"): the owner's notices as a page and as a
Server-Sent Events stream, their webhook deliveries' state, and a webhook subscription.
The services decide who may read what (only the owner's, in a project the token sees); the
gateway only translates.

The stream polls ListNotices. A notice's position is its creation time and id, and two
transactions may commit out of that order, so each poll reads again from ``LOOKBACK_MS``
before the newest notice sent and skips the ids it already sent: a late commit is still
streamed, once. Message ids are the notices' cursors (resume with Last-Event-ID)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import long_task_service_pb2 as pb

from gateway import messages
from gateway.http import int_param, json_response, last_event_id, sse_response
from gateway.problems import Problem
from gateway.routes.common import CALL_TIMEOUT_S, Context, body_of, context, endpoint
from gateway.routes.common import principal as authenticate

#: How far back each poll of the stream reads again (commits out of creation order).
LOOKBACK_MS = 30_000
POLL_S = 0.5
_SENT_KEPT = 10_000


def _refuse_other_projects(request: Request, query_token: bool = False) -> str:
    who = authenticate(request, query_token=query_token)
    project = str(request.path_params["project"])
    if not who.sees(project):
        raise Problem(403, "PERMISSION_DENIED", f"this token does not see project {project}")
    return project


@endpoint
async def list_notices(request: Request) -> Response:
    project = _refuse_other_projects(request)
    query = request.query_params
    asked = pb.ListNoticesRequest(
        project_id=project,
        owner_id=query.get("owner_id", ""),
        after_cursor=query.get("after_cursor", ""),
        page_size=int_param(query.get("page_size"), "page_size"),
    )
    answer = await context(request).long_tasks.ListNotices(asked, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer))


@endpoint
async def list_notice_deliveries(request: Request) -> Response:
    project = _refuse_other_projects(request)
    query = request.query_params
    asked = pb.ListNoticeDeliveriesRequest(
        project_id=project,
        owner_id=query.get("owner_id", ""),
        notice_id=query.get("notice_id", ""),
        page_size=int_param(query.get("page_size"), "page_size"),
    )
    call = context(request).long_tasks.ListNoticeDeliveries
    return json_response(messages.to_dict(await call(asked, timeout=CALL_TIMEOUT_S)))


@endpoint
async def register_notice_webhook(request: Request) -> Response:
    project = _refuse_other_projects(request)
    document = await body_of(request)
    if "project_id" in document:
        raise Problem(400, "INVALID_ARGUMENT", "project_id is the path's, not a body field")
    asked = messages.from_dict(document, pb.RegisterNoticeWebhookRequest())
    asked.project_id = project
    call = context(request).long_tasks.RegisterNoticeWebhook
    answer = await call(asked, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer), 201)


@endpoint
async def stream_notices(request: Request) -> Response:
    project = _refuse_other_projects(request, query_token=True)
    ctx = context(request)
    first = pb.ListNoticesRequest(
        project_id=project,
        owner_id=request.query_params.get("owner_id", ""),
        after_cursor=last_event_id(request),
        page_size=1,
    )
    # A refusal (another owner's, a malformed cursor) is a problem here, not an ended stream.
    await ctx.long_tasks.ListNotices(first, timeout=CALL_TIMEOUT_S)
    return sse_response(_stream(ctx, first))


def _cursor_at(ms: int) -> str:
    """The position just before every notice created at or after ``ms`` (the services'
    cursor: creation time and id)."""
    return base64.urlsafe_b64encode(f"{max(ms, 0) - 1}\0~".encode()).decode()


async def _stream(ctx: Context, first: pb.ListNoticesRequest) -> AsyncIterator[str]:
    yield f"retry: {2000}\n: connected\n\n"
    cursor = first.after_cursor
    sent: dict[str, int] = {}
    newest = -1
    idle = 0.0
    while True:
        asked = pb.ListNoticesRequest()
        asked.CopyFrom(first)
        asked.page_size = 200
        asked.after_cursor = _cursor_at(newest - LOOKBACK_MS) if newest >= 0 else cursor
        try:
            page = await ctx.long_tasks.ListNotices(asked, timeout=CALL_TIMEOUT_S)
        except Exception:  # the upstream went away: the client reconnects with its id
            return
        fresh = [n for n in page.notices if n.notice_id not in sent]
        for notice in fresh:
            at = notice.create_time.ToMilliseconds()
            sent[notice.notice_id] = at
            newest = max(newest, at)
            yield f"id: {notice.cursor}\nevent: notice\ndata: {messages.to_json(notice)}\n\n"
        if len(sent) > _SENT_KEPT:
            floor = newest - 2 * LOOKBACK_MS
            sent = {k: v for k, v in sent.items() if v >= floor}
        if fresh:
            idle = 0.0
            continue
        await asyncio.sleep(POLL_S)
        idle += POLL_S
        if idle >= ctx.heartbeat_s:
            idle = 0.0
            yield ": heartbeat\n\n"
