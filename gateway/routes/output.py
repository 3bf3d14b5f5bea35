"""A run's output over REST: a page (``GET .../runs/{run}/output``) and a follow as
Server-Sent Events (``GET .../runs/{run}/output:stream``), both from ReadRunOutput.

Output is not the event log: it is addressed by byte offset in an attempt's stored text, so
the follow polls ReadRunOutput from the last offset (there is no commit stream to watch) and
its resume id is ``<attempt_id>:<offset>``. Without an attempt in the request the follow
reads the run's current attempt and, when a retry makes a new one current, reads the rest of
the old one first, then announces the new one (``event: attempt``) and reads it from 0. When
the run has ended and everything is read it sends ``event: end`` and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import common_pb2, run_service_pb2

from gateway import messages
from gateway.http import int_param, json_response, last_event_id, sse_response
from gateway.problems import Problem, from_rpc_error
from gateway.routes.common import CALL_TIMEOUT_S, context, endpoint, principal, visible_run
from gateway.sse import RETRY_MS

if TYPE_CHECKING:
    from truerun.v1.run_service_pb2_grpc import RunServiceAsyncStub as Runs

log = logging.getLogger(__name__)

R = run_service_pb2
POLL_S = 0.5  # how often a follow asks again while nothing new came
_MAX_OFFSET = 2**63
_FINISHED = {
    common_pb2.RUN_STATUS_SUCCEEDED,
    common_pb2.RUN_STATUS_FAILED,
    common_pb2.RUN_STATUS_CANCELLED,
    common_pb2.RUN_STATUS_TIMED_OUT,
}
Page = run_service_pb2.ReadRunOutputResponse


@endpoint
async def read_output(request: Request) -> Response:
    who = principal(request)
    query = request.query_params
    offset = int_param(query.get("offset"), "offset", _MAX_OFFSET)
    max_bytes = int_param(query.get("max_bytes"), "max_bytes")
    attempt_id = query.get("attempt_id", "").strip()
    run = await visible_run(
        request, who, request.path_params["project"], request.path_params["run"]
    )
    if not attempt_id and not run.current_attempt_id:
        # Not yet started: nothing to read, which is not an error for a reader.
        return json_response(messages.to_dict(_not_started(run)))
    page = await context(request).runs.ReadRunOutput(
        R.ReadRunOutputRequest(
            run_id=run.id, attempt_id=attempt_id, offset=offset, max_bytes=max_bytes
        ),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(page))


@endpoint
async def stream_output(request: Request) -> Response:
    who = principal(request, query_token=True)
    ctx = context(request)
    query = request.query_params
    pinned = query.get("attempt_id", "").strip()
    attempt_id, offset = pinned, int_param(query.get("offset"), "offset", _MAX_OFFSET)
    resume = last_event_id(request)
    if resume:
        attempt_id, offset = _resume_id(resume)
        if pinned and attempt_id != pinned:
            raise Problem(400, "INVALID_ARGUMENT", "Last-Event-ID is of another attempt")
    run = await visible_run(
        request, who, request.path_params["project"], request.path_params["run"]
    )
    if attempt_id:
        # An unknown attempt or a bad offset fails here, as a 4xx, not as an ended stream.
        await ctx.runs.ReadRunOutput(
            R.ReadRunOutputRequest(
                run_id=run.id, attempt_id=attempt_id, offset=offset, max_bytes=1
            ),
            timeout=CALL_TIMEOUT_S,
        )
    follow = _Follow(ctx.runs, run.id, pinned, attempt_id, offset, POLL_S)
    return sse_response(_framed(follow.messages(), ctx.heartbeat_s))


class _Follow:
    """The SSE messages of one follow; ``None`` between polls (a chance for a heartbeat)."""

    def __init__(
        self, runs: Runs, run_id: str, pinned: str, attempt_id: str, offset: int, poll_s: float
    ) -> None:
        self.runs, self.run_id, self.pinned, self.poll_s = runs, run_id, pinned, poll_s
        self.attempt_id, self.offset = attempt_id, offset  # where the client is

    async def read(self, attempt_id: str, offset: int) -> Page:
        request = R.ReadRunOutputRequest(run_id=self.run_id, attempt_id=attempt_id, offset=offset)
        return await self.runs.ReadRunOutput(request, timeout=CALL_TIMEOUT_S)

    async def messages(self) -> AsyncGenerator[str | None]:
        while True:
            if not self.pinned and not self.attempt_id:
                run = await self.runs.GetRun(R.GetRunRequest(id=self.run_id), timeout=10)
                if not run.current_attempt_id:  # not started yet
                    if run.status in _FINISHED:
                        yield _message("end", None, {})
                        return
                    yield None
                    await asyncio.sleep(self.poll_s)
                    continue
            asked = self.offset
            page = await self.read(self.pinned, asked)
            if page.attempt_id != self.attempt_id:
                if self.attempt_id:
                    async for message in self.drain():
                        yield message
                self.attempt_id, self.offset = page.attempt_id, 0
                attempt = {"attempt_id": page.attempt_id, "attempt_no": page.attempt_no}
                yield _message("attempt", f"{page.attempt_id}:0", attempt)
                if asked:
                    continue  # that page was read at the old attempt's offset
            for message in self.show(page):
                yield message
            if page.next_offset < page.stored_bytes:
                continue  # a full page: the next one at once
            if page.attempt_finished and (page.run_finished or self.pinned):
                yield _message("end", None, {})
                return
            yield None
            await asyncio.sleep(self.poll_s)

    async def drain(self) -> AsyncIterator[str]:
        """The rest of the attempt the client was reading (a later one is current now)."""
        while True:
            page = await self.read(self.attempt_id, self.offset)
            for message in self.show(page):
                yield message
            if page.next_offset >= page.stored_bytes:
                return

    def show(self, page: Page) -> list[str]:
        shown = []
        for chunk in page.chunks:
            end = chunk.offset + len(chunk.text.encode())
            data = {
                "attempt_id": page.attempt_id,
                "attempt_no": page.attempt_no,
                **messages.to_dict(chunk),
            }
            shown.append(_message("output", f"{page.attempt_id}:{end}", data))
        self.offset = max(self.offset, page.next_offset)
        return shown


async def _framed(follow: AsyncGenerator[str | None], heartbeat_s: float) -> AsyncIterator[str]:
    """The stream's text: a retry hint, the messages, a heartbeat comment whenever
    ``heartbeat_s`` passed without one. It ends when the follow does or the services fail
    (the client resumes with Last-Event-ID)."""
    loop = asyncio.get_running_loop()
    yield f"retry: {RETRY_MS}\n: connected\n\n"
    quiet_since = loop.time()
    try:
        async with contextlib.aclosing(follow):  # its polling stops with the response
            async for message in follow:
                if message is not None:
                    yield message
                elif loop.time() - quiet_since < heartbeat_s:
                    continue
                else:
                    yield ": heartbeat\n\n"
                quiet_since = loop.time()
    except grpc.RpcError as error:
        log.info("output follow ended: %s", from_rpc_error(error).detail)


def _message(event: str, event_id: str | None, data: dict[str, Any]) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"{head}event: {event}\ndata: {body}\n\n"


def _not_started(run: common_pb2.Run) -> Page:
    """The answer for a run without an attempt (queued, or ended before one started)."""
    finished = run.status in _FINISHED
    return R.ReadRunOutputResponse(attempt_finished=finished, run_finished=finished)


def _resume_id(raw: str) -> tuple[str, int]:
    """``<attempt_id>:<offset>`` (the id of an output or attempt message)."""
    attempt_id, colon, offset = raw.rpartition(":")
    if not colon or not attempt_id:
        raise Problem(400, "INVALID_ARGUMENT", "Last-Event-ID must be <attempt_id>:<offset>")
    return attempt_id, int_param(offset, "Last-Event-ID's offset", _MAX_OFFSET)
