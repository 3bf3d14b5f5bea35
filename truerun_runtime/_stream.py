"""One Connect stream's sending side. StreamSession: what was sent on it and the queue its
writer drains. Batcher, the writer's batching: the events queued at the moment the writer
takes its next message go together in one RuntimeEvents message (bounded), so what
accumulated while the previous write was in flight costs one stream message; a lone event
goes at once, as itself. No timer: nothing waits for company. Other messages keep their
place in the queue's order (a StartResult still goes before the events queued after it)."""

from __future__ import annotations

import asyncio

from truerun.v1 import runtime_service_pb2 as pb

MAX_EVENTS_PER_MESSAGE = 256
MAX_BYTES_PER_MESSAGE = 256 * 1024


class Batcher:
    """Takes a writer's messages from ``queue`` (None ends it), events batched."""

    def __init__(self, queue: asyncio.Queue[pb.ConnectRequest | None]) -> None:
        self._queue = queue
        self._carried: list[pb.ConnectRequest | None] = []  # taken, but not an event

    async def next(self) -> pb.ConnectRequest | None:
        message = self._carried.pop() if self._carried else await self._queue.get()
        if message is None or message.WhichOneof("kind") != "event":
            return message
        events = [message.event]
        size = message.event.ByteSize()
        while (
            len(events) < MAX_EVENTS_PER_MESSAGE
            and size < MAX_BYTES_PER_MESSAGE
            and not self._queue.empty()
        ):
            following = self._queue.get_nowait()
            if following is None or following.WhichOneof("kind") != "event":
                self._carried.append(following)  # goes next, after these events
                break
            events.append(following.event)
            size += following.event.ByteSize()
        if len(events) == 1:
            return message
        return pb.ConnectRequest(events=pb.RuntimeEvents(events=events))


class StreamSession:
    """One Connect stream: what was sent on it, and the queue its writer drains."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[pb.ConnectRequest | None] = asyncio.Queue()
        self.sent: dict[str, int] = {}
        self.held: dict[str, list[pb.RuntimeEvent]] = {}

    def send_event(self, event: pb.RuntimeEvent) -> None:
        held = self.held.get(event.attempt_id)
        if held is not None:
            held.append(event)
        elif event.seq > self.sent.get(event.attempt_id, 0):
            self.sent[event.attempt_id] = event.seq
            self.queue.put_nowait(pb.ConnectRequest(event=event))
