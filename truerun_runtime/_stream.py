"""One Connect stream's sending side. StreamSession: what was sent on it and the queue its
writer drains. Batcher, the writer's batching: the answers to Starts and the events queued at
the moment the writer takes its next message go together, the answers in one StartResults
message and then the events in one RuntimeEvents message (each bounded), so what accumulated
while the previous write was in flight costs two stream messages, not two per attempt; a lone
message goes at once, as itself. No timer: nothing waits for company.

Order: each attempt's StartResult still goes before its first event (the agent queues the
answer first and holds the events until then), and answers keep their order among
themselves, as events do; an answer may pass another attempt's events, which says nothing
about either. Every other message (a heartbeat, a Cancel's or an Inspect's answer) is a
boundary: nothing queued after it goes before it, nothing queued before it after it."""

from __future__ import annotations

import asyncio
from collections import deque

from truerun.v1 import runtime_service_pb2 as pb

MAX_EVENTS_PER_MESSAGE = 256
MAX_BYTES_PER_MESSAGE = 256 * 1024
_BATCHED = frozenset({"event", "start_result"})


class Batcher:
    """Takes a writer's messages from ``queue`` (None ends it), answers and events batched."""

    def __init__(self, queue: asyncio.Queue[pb.ConnectRequest | None]) -> None:
        self._queue = queue
        #: taken from the queue, in order, not sent yet: built batches and a boundary
        self._carried: deque[pb.ConnectRequest | None] = deque()

    async def next(self) -> pb.ConnectRequest | None:
        if self._carried:
            return self._carried.popleft()
        message = await self._queue.get()
        if message is None or self._queue.empty() or message.WhichOneof("kind") not in _BATCHED:
            return message
        results: list[pb.StartResult] = []
        events: list[pb.RuntimeEvent] = []
        size = 0
        following: pb.ConnectRequest | None = message
        while True:
            assert following is not None
            if following.WhichOneof("kind") == "event":
                events.append(following.event)
                size += following.event.ByteSize()
            else:
                results.append(following.start_result)
                size += following.start_result.ByteSize()
            full = max(len(events), len(results)) >= MAX_EVENTS_PER_MESSAGE
            if full or size >= MAX_BYTES_PER_MESSAGE or self._queue.empty():
                boundary = False
                break
            following = self._queue.get_nowait()
            if following is None or following.WhichOneof("kind") not in _BATCHED:
                boundary = True
                break
        batches = [m for m in (_answers(results), _events(events)) if m is not None]
        self._carried.extend(batches[1:])
        if boundary:
            self._carried.append(following)  # goes after everything taken before it
        return batches[0]


def _answers(results: list[pb.StartResult]) -> pb.ConnectRequest | None:
    if not results:
        return None
    if len(results) == 1:
        return pb.ConnectRequest(start_result=results[0])
    return pb.ConnectRequest(start_results=pb.StartResults(results=results))


def _events(events: list[pb.RuntimeEvent]) -> pb.ConnectRequest | None:
    if not events:
        return None
    if len(events) == 1:
        return pb.ConnectRequest(event=events[0])
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
