"""Events: a run's and a project's committed events, as pages and as Server-Sent Events
streams (gateway.sse) over WatchRunEvents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import common_pb2, run_service_pb2

from gateway import messages
from gateway.http import has_last_event_id, int_param, json_response, last_event_id, sse_response
from gateway.problems import Problem
from gateway.routes.common import CALL_TIMEOUT_S, context, endpoint, principal, visible_run
from gateway.sse import event_stream

R = run_service_pb2


@endpoint
async def list_run_events(request: Request) -> Response:
    who = principal(request)
    query = request.query_params
    listing = R.ListRunEventsRequest(
        run_id=request.path_params["run"],
        after_sequence=int_param(query.get("after_sequence"), "after_sequence"),
        page_size=int_param(query.get("page_size"), "page_size"),
        page_token=query.get("page_token", ""),
    )
    await visible_run(request, who, request.path_params["project"], listing.run_id)
    answer = await context(request).runs.ListRunEvents(listing, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer))


@endpoint
async def stream_run_events(request: Request) -> Response:
    who = principal(request, query_token=True)
    ctx = context(request)
    raw = last_event_id(request)
    after = int_param(raw or None, "Last-Event-ID")
    run = await visible_run(
        request, who, request.path_params["project"], request.path_params["run"]
    )
    call = ctx.runs.WatchRunEvents(R.WatchRunEventsRequest(run_id=run.id, after_sequence=after))
    return sse_response(event_stream(_aiter(call), _sequence_of, ctx.heartbeat_s, call.cancel))


@endpoint
async def list_project_events(request: Request) -> Response:
    who = principal(request)
    project = request.path_params["project"]
    query = request.query_params
    listing = R.ListProjectEventsRequest(
        project_id=project,
        after_cursor=query.get("after_cursor", ""),
        page_size=int_param(query.get("page_size"), "page_size"),
    )
    if not who.sees(project):
        empty = R.ListProjectEventsResponse(next_cursor=listing.after_cursor)
        return json_response(messages.to_dict(empty))
    answer = await context(request).runs.ListProjectEvents(listing, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer))


@endpoint
async def stream_project_events(request: Request) -> Response:
    who = principal(request, query_token=True)
    ctx = context(request)
    project = request.path_params["project"]
    cursor = last_event_id(request)
    start = request.query_params.get("from", "")
    if start not in ("", "now"):
        raise Problem(400, "INVALID_ARGUMENT", "from must be 'now' (or absent)")
    if not who.sees(project):
        return sse_response(event_stream(None, _cursor_of, ctx.heartbeat_s))
    first_id = ""
    if start == "now" and not has_last_event_id(request):
        # No replay of the history: the stream starts at the position now, which is sent
        # first as a bare id so a reconnect resumes from it even before any event.
        position = await ctx.runs.GetEventCursor(
            R.GetEventCursorRequest(project_id=project), timeout=CALL_TIMEOUT_S
        )
        cursor = first_id = position.cursor
    else:
        # A malformed cursor fails here, as a 400, rather than as an ended stream.
        await ctx.runs.ListProjectEvents(
            R.ListProjectEventsRequest(project_id=project, after_cursor=cursor, page_size=1),
            timeout=CALL_TIMEOUT_S,
        )
    call = ctx.runs.WatchRunEvents(R.WatchRunEventsRequest(project_id=project, after_cursor=cursor))
    return sse_response(
        event_stream(_aiter(call), _cursor_of, ctx.heartbeat_s, call.cancel, first_id)
    )


def _cursor_of(event: common_pb2.RunEvent) -> str:
    return event.cursor


def _sequence_of(event: common_pb2.RunEvent) -> str:
    return str(event.sequence)


async def _aiter(
    call: grpc.aio.UnaryStreamCall[Any, common_pb2.RunEvent],
) -> AsyncIterator[common_pb2.RunEvent]:
    async for event in call:
        yield event
