"""The project's long tasks as a Server-Sent Events stream (the dashboard's "In progress"
group, its header badge and the task inspector follow it; docs/dashboard.md "Long tasks").

Neither the run event stream (an attempt's run events say nothing of a pause, an answer or
a step's progress) nor the notices stream (only what needs a person) tells a surface that a
task changed, so this stream polls ListLongTasks every ``POLL_S`` and sends the whole task
(GetLongTask: its progress, steps, criteria, decisions) each time its etag or its display
label moved. Every change of a task moves its etag (each step action and each command bumps
the version; lease renewals do not change what is shown); a queued task's place ("2 ahead
of it") moves with the other tasks, without its own etag: hence the label, which carries the
place, is part of what is compared. First it sends every task shown: the active ones
and those finished in the last ``RECENT_MS``; so a reconnect starts from the current state,
and there is no Last-Event-ID to resume from (nothing is replayed, nothing is missed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import long_task_service_pb2 as pb

from gateway import messages
from gateway.http import sse_response
from gateway.problems import Problem
from gateway.routes.common import CALL_TIMEOUT_S, Context, context, endpoint, principal

POLL_S = 0.5
#: Terminal tasks finished longer ago than this are not shown (and not sent).
RECENT_MS = 24 * 3600 * 1000
_PAGE = 200


@endpoint
async def stream_long_tasks(request: Request) -> Response:
    who = principal(request, query_token=True)
    project = str(request.path_params["project"])
    if not who.sees(project):
        raise Problem(403, "PERMISSION_DENIED", f"this token does not see project {project}")
    ctx = context(request)
    listing = pb.ListLongTasksRequest(project_id=project, page_size=_PAGE)
    # An unreachable upstream is a 503 here, not a stream that ends at once.
    await ctx.long_tasks.ListLongTasks(listing, timeout=CALL_TIMEOUT_S)
    return sse_response(_stream(ctx, listing))


def seen_as(task: pb.LongTask) -> str:
    """What a surface shows that may move: the etag, and the label (a queued task's place)."""
    return f"{task.etag}|{task.display_label}"


def shown(task: pb.LongTask, now_ms: int) -> bool:
    """Active, or finished recently (a terminal task has a finish time)."""
    if not task.HasField("finish_time"):
        return True
    return now_ms - task.finish_time.ToMilliseconds() <= RECENT_MS


async def _stream(ctx: Context, listing: pb.ListLongTasksRequest) -> AsyncIterator[str]:
    yield "retry: 2000\n: connected\n\n"
    sent: dict[str, str] = {}  # task id -> what it was seen as when last sent
    idle = 0.0
    while True:
        try:
            page = await ctx.long_tasks.ListLongTasks(listing, timeout=CALL_TIMEOUT_S)
            now_ms = int(time.time() * 1000)
            moved = [
                t
                for t in page.long_tasks
                if sent.get(t.long_task_id) != seen_as(t) and shown(t, now_ms)
            ]
            for entry in moved:
                asked = pb.GetLongTaskRequest(
                    project_id=listing.project_id, long_task_id=entry.long_task_id
                )
                task = await ctx.long_tasks.GetLongTask(asked, timeout=CALL_TIMEOUT_S)
                sent[task.long_task_id] = seen_as(task)
                yield f"event: long_task\ndata: {messages.to_json(task)}\n\n"
        except Exception:  # the upstream went away: the client reconnects and starts over
            return
        if moved:
            idle = 0.0
        await asyncio.sleep(POLL_S)
        idle += POLL_S
        if idle >= ctx.heartbeat_s:
            idle = 0.0
            yield ": heartbeat\n\n"
