"""Server-Sent Events framing: committed events from a gRPC watch, heartbeats while idle.

Each message is ``id: <resume id>``, ``event: run_event``, ``data: <RunEvent JSON>`` on one
line each; a comment line every ``heartbeat_s`` keeps proxies from closing an idle stream.
The stream ends when the upstream watch ends or fails; the client reconnects with
Last-Event-ID and the upstream replay makes the resume exactly-once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import grpc
from truerun.v1 import common_pb2

from gateway.messages import to_json
from gateway.problems import code_of, from_rpc_error

log = logging.getLogger(__name__)

RETRY_MS = 2000
_END = object()


def frame(event_id: str, data: str) -> str:
    return f"id: {event_id}\nevent: run_event\ndata: {data}\n\n"


async def event_stream(
    watch: AsyncIterator[common_pb2.RunEvent] | None,
    resume_id: Callable[[common_pb2.RunEvent], str],
    heartbeat_s: float,
    cancel: Callable[[], object] = lambda: None,
    first_id: str = "",
) -> AsyncIterator[str]:
    """SSE text for ``watch`` (None = an empty stream that only sends heartbeats);
    ``first_id``: the resume id to set before any event (a message with an id and no data
    sets the client's last event id and dispatches nothing)."""
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=256)

    async def pump() -> None:
        if watch is None:
            return  # never ends: the client closes it
        try:
            async for event in watch:
                await queue.put(event)
        except grpc.RpcError as error:
            if code_of(error) != grpc.StatusCode.CANCELLED:
                log.info("upstream watch ended: %s", from_rpc_error(error).detail)
        # Not in a finally: when the client went away this task is cancelled, and nobody
        # would take _END from a full queue.
        await queue.put(_END)

    reader = asyncio.create_task(pump())
    try:
        yield f"retry: {RETRY_MS}\n: connected\n\n"
        if first_id:
            yield f"id: {first_id}\n\n"
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), heartbeat_s)
            except TimeoutError:
                yield ": heartbeat\n\n"
                continue
            if item is _END:
                return
            assert isinstance(item, common_pb2.RunEvent)
            yield frame(resume_id(item), to_json(item))
    finally:
        cancel()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
