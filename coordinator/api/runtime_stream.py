"""One open Connect stream's reading side: the events read and not yet applied (single and
batched messages alike go into one buffer, so one micro-batch apply covers them), and the
answers to Starts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence

from truerun.v1 import runtime_service_pb2 as pb

from coordinator.dispatch.sessions import Session
from kernel import telemetry


def answered(session: Session, results: Iterable[pb.StartResult]) -> None:
    """Each answer resolves its attempt's awaited Start (an answer nobody awaits: nothing)."""
    for result in results:
        future = session.pending_starts.get(result.attempt_id)
        if future is not None and not future.done():
            future.set_result(result)


def trace(batch: list[pb.RuntimeEvent], began: int) -> None:
    """Each event that carries its attempt's trace context gets a span there (applied in
    this batch); events without one cost nothing."""
    for event in batch:
        if event.trace_parent:
            kind = pb.RuntimeEventType.Name(event.type).removeprefix("RUNTIME_EVENT_TYPE_")
            telemetry.record(
                f"runtime event {kind.lower()}",
                event.trace_parent,
                began,
                {"truerun.attempt_id": event.attempt_id, "truerun.seq": event.seq},
            )


class Stream:
    """One open Connect: its reader and applier tasks and the events read, not yet applied."""

    def __init__(self) -> None:
        self.buffered: list[pb.RuntimeEvent] = []
        self.arrived = asyncio.Event()
        self.stopping = False
        self.handling: asyncio.Future[None] | None = None
        self.reader: asyncio.Task[None]
        self.applier: asyncio.Task[None]
        self.read = 0  # events read from the stream so far
        self._done = 0  # of those, applied (or refused) and acknowledged
        self._progress = asyncio.Event()

    def take(self, session: Session, events: Sequence[pb.RuntimeEvent]) -> None:
        """Events read from the stream: buffered for the applier, where each gets the checks
        of a single event (authority, callback token, seq)."""
        for event in events:
            session.evidence(event.attempt_id)
        self.buffered.extend(events)
        self.read += len(events)
        self.arrived.set()

    def applied(self, count: int) -> None:
        self._done += count
        self._progress.set()

    async def caught_up(self, timeout_s: float = 30.0) -> None:
        """Until every event read so far is applied (bounded: a failed batch closes the
        stream, and the answer that waits is then moot)."""
        target = self.read
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._done < target and not self.applier.done():
            self._progress.clear()
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), remaining)
