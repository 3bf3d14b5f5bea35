"""A fake truerun RuntimeService on 127.0.0.1:0 for runtime agent tests.

It speaks the real protocol over real gRPC: answers Hello with Welcome, records everything
a runtime sends, commits events like the server must (per attempt only seq == last + 1 is
applied; duplicates and gaps are recorded and change nothing) and acknowledges committed
events (``auto_ack``), and lets a test send Start / Cancel / Inspect / Ack, drop the stream,
or refuse new streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
from google.protobuf import struct_pb2
from truerun.v1 import capacity_service_pb2 as cpb
from truerun.v1 import runtime_service_pb2 as pb
from truerun.v1 import runtime_service_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]
T = pb.RuntimeEventType


class Aborted:
    """What makes the fake server break a stream with an error."""


class FakeSession:
    def __init__(self, hello: pb.Hello) -> None:
        self.hello = hello
        self.outgoing: asyncio.Queue[pb.ConnectResponse | None | Aborted] = asyncio.Queue()
        #: What the runtime sent, a batch as its messages one by one (as truerun reads it).
        self.received: list[pb.ConnectRequest] = []
        #: What the runtime sent, exactly as it went on the stream (batches as batches).
        self.messages: list[pb.ConnectRequest] = []
        self.closed = False

    def send(self, message: pb.ConnectResponse) -> None:
        self.outgoing.put_nowait(message)

    def send_close(self) -> None:
        """End this stream from the server's side."""
        self.outgoing.put_nowait(None)

    def send_abort(self) -> None:
        """Break this stream with UNAVAILABLE, as a server that died does."""
        self.outgoing.put_nowait(Aborted())

    def events(self, attempt_id: str | None = None) -> list[pb.RuntimeEvent]:
        return [
            m.event
            for m in self.received
            if m.HasField("event") and attempt_id in (None, m.event.attempt_id)
        ]


class FakeRuntimeServer(runtime_service_pb2_grpc.RuntimeServiceServicer):
    def __init__(self, *, heartbeat_ms: int = 100, auto_ack: bool = True) -> None:
        self.heartbeat_ms = heartbeat_ms
        self.auto_ack = auto_ack
        self.refuse = False
        self.sessions: list[FakeSession] = []
        self.committed: defaultdict[str, list[pb.RuntimeEvent]] = defaultdict(list)
        self.duplicates: list[pb.RuntimeEvent] = []
        self.gaps: list[pb.RuntimeEvent] = []
        self.heartbeats: list[cpb.Observation] = []
        self.unary_calls: list[pb.ReportEventsRequest] = []
        self._changed = asyncio.Event()

    # -- the servicer ----------------------------------------------------------------------

    async def Connect(
        self, request_iterator: AsyncIterator[pb.ConnectRequest], context: Ctx
    ) -> AsyncIterator[pb.ConnectResponse]:
        if self.refuse:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "refusing runtimes (test)")
        first = await anext(request_iterator)
        assert first.HasField("hello"), "the first message must be a Hello"
        session = FakeSession(first.hello)
        self.sessions.append(session)
        self._notify()
        yield pb.ConnectResponse(
            welcome=pb.Welcome(heartbeat_interval_ms=self.heartbeat_ms, observation_ttl_ms=3000)
        )
        reader = asyncio.create_task(self._read(session, request_iterator))
        try:
            while (message := await session.outgoing.get()) is not None:
                if isinstance(message, Aborted):
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "the server died (test)")
                yield message
        finally:
            session.closed = True
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self._notify()

    async def ReportEvents(
        self, request: pb.ReportEventsRequest, context: Ctx
    ) -> pb.ReportEventsResponse:
        self.unary_calls.append(request)
        acks: dict[str, int] = {}
        for event in request.events:
            acks[event.attempt_id] = self._commit(event)
        self._notify()
        return pb.ReportEventsResponse(
            acks=[pb.Ack(attempt_id=a, seq=s) for a, s in acks.items() if s > 0]
        )

    async def _read(self, session: FakeSession, requests: AsyncIterator[pb.ConnectRequest]) -> None:
        try:
            async for batch in requests:
                session.messages.append(batch)
                for message in _unbatched(batch):
                    self._take(session, message)
                self._notify()
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        finally:
            session.outgoing.put_nowait(None)

    def _take(self, session: FakeSession, message: pb.ConnectRequest) -> None:
        session.received.append(message)
        if message.HasField("heartbeat"):
            self.heartbeats.append(message.heartbeat.observation)
        if message.HasField("event"):
            last = self._commit(message.event)
            if self.auto_ack and last > 0:
                session.send(
                    pb.ConnectResponse(ack=pb.Ack(attempt_id=message.event.attempt_id, seq=last))
                )

    def _commit(self, event: pb.RuntimeEvent) -> int:
        """Apply ``event`` if it is the next seq; returns the attempt's last committed seq."""
        committed = self.committed[event.attempt_id]
        if event.seq == len(committed) + 1:
            committed.append(event)
        elif event.seq <= len(committed):
            self.duplicates.append(event)
        else:
            self.gaps.append(event)
        return len(committed)

    # -- what a test does ------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 10.0, what: str = ""
    ) -> Any:
        """Wait until ``predicate()`` is truthy (re-checked on every message); return it."""
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {what or predicate}")
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, 0.25))
        return value

    @property
    def session(self) -> FakeSession:
        open_sessions = [s for s in self.sessions if not s.closed]
        assert open_sessions, "no runtime is connected"
        return open_sessions[-1]

    async def connected(self, count: int = 1) -> FakeSession:
        """Wait for the ``count``-th stream to be open and return it."""
        await self.wait_for(
            lambda: len(self.sessions) >= count and not self.sessions[count - 1].closed,
            what=f"stream #{count}",
        )
        return self.sessions[count - 1]

    async def start(
        self,
        attempt_id: str,
        spec: dict[str, Any],
        *,
        front_of_queue: bool = False,
        workspace_path: str = "",
        self_fence_after_ms: int = 0,
    ) -> pb.StartResult:
        struct = struct_pb2.Struct()
        struct.update(spec)
        start = pb.Start(
            run_id=f"run-{attempt_id}",
            attempt_id=attempt_id,
            runtime_task_id=task_id(attempt_id),
            callback_token=f"cb-{attempt_id}",
            spec=struct,
            front_of_queue=front_of_queue,
            workspace_path=workspace_path,
            self_fence_after_ms=self_fence_after_ms,
        )
        message = await self._command(pb.ConnectResponse(start=start), "start_result", attempt_id)
        return message.start_result

    async def cancel(self, attempt_id: str, grace_ms: int = 0, task: str = "") -> pb.CancelResult:
        cancel = pb.Cancel(
            attempt_id=attempt_id, runtime_task_id=task or task_id(attempt_id), grace_ms=grace_ms
        )
        message = await self._command(
            pb.ConnectResponse(cancel=cancel), "cancel_result", attempt_id
        )
        return message.cancel_result

    async def inspect(self, attempt_id: str, task: str = "") -> pb.InspectResult:
        inspect = pb.Inspect(attempt_id=attempt_id, runtime_task_id=task or task_id(attempt_id))
        message = await self._command(
            pb.ConnectResponse(inspect=inspect), "inspect_result", attempt_id
        )
        return message.inspect_result

    async def _command(
        self, message: pb.ConnectResponse, answer: str, attempt_id: str
    ) -> pb.ConnectRequest:
        session = self.session
        before = len(session.received)
        session.send(message)

        def answered() -> pb.ConnectRequest | None:
            for received in session.received[before:]:
                if received.WhichOneof("kind") == answer:
                    if getattr(received, answer).attempt_id == attempt_id:
                        return received
            return None

        result: pb.ConnectRequest = await self.wait_for(answered, what=answer)
        return result

    def drop(self) -> None:
        """End the current stream (the runtime must reconnect)."""
        self.session.send_close()

    def abort(self) -> None:
        """Break the current stream with an error, as a server that died does."""
        self.session.send_abort()

    # -- reading what arrived --------------------------------------------------------------

    def events(self, attempt_id: str) -> list[pb.RuntimeEvent]:
        return list(self.committed.get(attempt_id, []))

    def types(self, attempt_id: str) -> list[int]:
        return [e.type for e in self.committed.get(attempt_id, [])]

    def has(self, attempt_id: str, event_type: T.ValueType, count: int = 1) -> bool:
        return self.types(attempt_id).count(event_type) >= count

    def output(self, attempt_id: str) -> str:
        return "".join(
            str(e.payload["data"])
            for e in self.committed.get(attempt_id, [])
            if e.type == pb.RUNTIME_EVENT_TYPE_OUTPUT and "data" in e.payload
        )

    def terminal(self, attempt_id: str) -> pb.RuntimeEvent | None:
        for event in self.committed.get(attempt_id, []):
            if event.type in TERMINAL:
                return event
        return None


TERMINAL = frozenset(
    {
        pb.RUNTIME_EVENT_TYPE_SUCCEEDED,
        pb.RUNTIME_EVENT_TYPE_FAILED,
        pb.RUNTIME_EVENT_TYPE_CANCELLED,
        pb.RUNTIME_EVENT_TYPE_TIMED_OUT,
    }
)


def _unbatched(message: pb.ConnectRequest) -> list[pb.ConnectRequest]:
    """A batched message as the single messages it stands for."""
    kind = message.WhichOneof("kind")
    if kind == "events":
        return [pb.ConnectRequest(event=e) for e in message.events.events]
    if kind == "start_results":
        return [pb.ConnectRequest(start_result=r) for r in message.start_results.results]
    return [message]


def task_id(attempt_id: str) -> str:
    return f"rt-task-{attempt_id}"


@asynccontextmanager
async def fake_runtime_server(**kwargs: Any) -> AsyncIterator[tuple[FakeRuntimeServer, str]]:
    """Serve a FakeRuntimeServer on 127.0.0.1:<free port>; yields (servicer, address)."""
    servicer = FakeRuntimeServer(**kwargs)
    server = grpc.aio.server(
        options=[
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
            ("grpc.http2.max_ping_strikes", 0),
        ]
    )
    runtime_service_pb2_grpc.add_RuntimeServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        for session in servicer.sessions:
            session.outgoing.put_nowait(None)
        await server.stop(None)
