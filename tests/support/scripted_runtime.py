"""A runtime whose every message the test writes by hand, over a real gRPC stream.

It sends only what the reference agent sends, as the agent sends it: its Hello says it reads
batched Starts (``accepts_batches=False`` plays an older runtime), and events queued together
go in one RuntimeEvents message (the agent's Batcher). A Starts message reaches the test as
its Starts one by one (``expect("start")``); ``start_messages`` keeps how they came.

With ``journal=True`` it plays the agent with a generated instance id, which keeps a Start
journal: every Start that reaches it is recorded on receipt (before the test answers it;
refused ones too), and an Inspect of an attempt it never received a Start for is answered
``NEVER_RECEIVED``. Without (the default) it plays the agent
with a configured instance id: no journal, ``NOT_FOUND``. One object is the instance id's whole
life; a test playing a restart of the same instance hands ``starts_received`` on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from google.protobuf import struct_pb2
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import runtime_service_pb2 as pb

from tests.support.runtime_stack import RUNTIME_TOKEN
from truerun_runtime._stream import Batcher
from truerun_runtime.agent.version import AGENT_VERSION

if TYPE_CHECKING:
    from truerun.v1.runtime_service_pb2_grpc import RuntimeServiceAsyncStub


class ScriptedRuntime:
    def __init__(
        self,
        stub: RuntimeServiceAsyncStub,
        owner: str = "alice",
        instance: str = "inst-1",
        device: str = "dev-1",
        token: str = RUNTIME_TOKEN,
        lineage: str = "",
        # the reference agent always names itself in its Hello; so does its double
        agent_version: str = AGENT_VERSION,
        journal: bool = False,
        accepts_batches: bool = True,
    ) -> None:
        self.owner, self.instance, self.device, self.token = owner, instance, device, token
        self.lineage, self.agent_version = lineage, agent_version
        self.journal = journal
        self.accepts_batches = accepts_batches
        #: How many Starts each Start-carrying message held, in arrival order (1: a Start).
        self.start_messages: list[int] = []
        self.starts_received: set[str] = set()  # the journal (kept, used only with journal)
        self._outgoing: asyncio.Queue[pb.ConnectRequest | None] = asyncio.Queue()
        self._stub = stub
        self._incoming: asyncio.Queue[pb.ConnectResponse] = asyncio.Queue()
        self._call: Any = None
        self._pump: asyncio.Task[None] | None = None
        self.seen: list[pb.ConnectResponse] = []  # messages passed over by expect()
        self.error: Exception | None = None

    async def _requests(self) -> AsyncIterator[pb.ConnectRequest]:
        batcher = Batcher(self._outgoing)  # the agent's writer
        while (message := await batcher.next()) is not None:
            yield message

    async def connect(self) -> pb.Welcome:
        hello = pb.Hello(
            runtime_token=self.token,
            owner_id=self.owner,
            runtime_instance_id=self.instance,
            routes=[cap.Route(device_id=self.device, kind="local")],
            lineage=self.lineage,
            agent_version=self.agent_version,
            accepts_batches=self.accepts_batches,
        )
        await self._outgoing.put(pb.ConnectRequest(hello=hello))
        self._call = self._stub.Connect(self._requests())
        self._pump = asyncio.create_task(self._read())
        welcome = await self.expect("welcome")
        return welcome.welcome

    async def _read(self) -> None:
        try:
            async for message in self._call:
                kind = message.WhichOneof("kind")
                if kind not in ("start", "starts"):
                    await self._incoming.put(message)
                    continue
                starts = message.starts.starts if kind == "starts" else [message.start]
                self.start_messages.append(len(starts))
                for start in starts:  # one by one, in order, as the agent handles them
                    self.starts_received.add(start.attempt_id)  # on receipt, as the agent
                    await self._incoming.put(pb.ConnectResponse(start=start))
        except Exception as error:  # the stream failed: the next expect() raises it
            self.error = error
            await self._incoming.put(pb.ConnectResponse())

    async def close(self) -> None:
        await self._outgoing.put(None)
        if self._call is not None:
            self._call.cancel()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)

    async def heartbeat(
        self, limit: int, active: Sequence[str] = (), queued: Sequence[str] = ()
    ) -> None:
        """An observation as the reference agent sends it: the tasks holding a slot and the
        tasks in the local queue, each by runtime task id."""
        observation = cap.Observation(
            owner_id=self.owner,
            runtime_instance_id=self.instance,
            routes=[cap.Route(device_id=self.device, kind="local")],
            limit=limit,
            active=len(active),
            active_task_ids=list(active),
            queued=len(queued),
            queued_task_ids=list(queued),
        )
        await self._outgoing.put(pb.ConnectRequest(heartbeat=pb.Heartbeat(observation=observation)))

    async def expect(self, kind: str, timeout: float = 10.0) -> pb.ConnectResponse:
        """The next message of ``kind``; acks and other kinds on the way are kept aside."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            message = await asyncio.wait_for(self._incoming.get(), max(remaining, 0.001))
            if self.error is not None:
                raise self.error
            if message.WhichOneof("kind") == kind:
                return message
            self.seen.append(message)

    async def answer_start(
        self,
        start: pb.Start,
        accepted: bool,
        reason: str = "",
        *,
        refusal: pb.StartRefusal.ValueType = pb.START_REFUSAL_INVALID_SPEC,
        seq: int | None = None,
    ) -> None:
        """As the reference agent answers: accepted with seq 1 (its ACCEPTED event follows);
        refused with seq 0, no event, as an invalid spec (the only refusal the agent makes).
        ``refusal`` and ``seq`` play another runtime (a transient refusal, any seq)."""
        result = pb.StartResult(
            attempt_id=start.attempt_id,
            runtime_task_id=start.runtime_task_id,
            accepted=accepted,
            reason=reason,
            seq=(1 if accepted else 0) if seq is None else seq,
            refusal=pb.START_REFUSAL_UNSPECIFIED if accepted else refusal,
        )
        await self._outgoing.put(pb.ConnectRequest(start_result=result))

    async def send_inspect_result(self, result: pb.InspectResult) -> None:
        if result.state == pb.INSPECT_STATE_NEVER_RECEIVED and not self.never_received(
            result.attempt_id
        ):
            raise AssertionError(
                f"the reference agent answers NEVER_RECEIVED for {result.attempt_id!r} only with "
                "a Start journal (journal=True) that holds no Start of it"
            )
        await self._outgoing.put(pb.ConnectRequest(inspect_result=result))

    def never_received(self, attempt_id: str) -> bool:
        """What the agent's journal proves: kept (``journal``) and no Start of the attempt."""
        return self.journal and attempt_id not in self.starts_received

    async def answer_inspect_without_task(self, inspect: pb.Inspect) -> None:
        """As the reference agent answers an Inspect of an attempt it holds no task of (never
        received, refused, or pruned): NEVER_RECEIVED where its journal proves it, else
        NOT_FOUND."""
        never = self.never_received(inspect.attempt_id)
        await self.send_inspect_result(
            pb.InspectResult(
                attempt_id=inspect.attempt_id,
                runtime_task_id=inspect.runtime_task_id,
                state=pb.INSPECT_STATE_NEVER_RECEIVED if never else pb.INSPECT_STATE_NOT_FOUND,
            )
        )

    async def event(
        self,
        start: pb.Start,
        seq: int,
        kind: int,
        exit_code: int | None = None,
        payload: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> None:
        event = runtime_event(start, seq, kind, exit_code, payload, token)
        await self._outgoing.put(pb.ConnectRequest(event=event))

    async def send(self, message: pb.ConnectRequest) -> None:
        """Any message, as it is (what a hostile or broken runtime might send)."""
        await self._outgoing.put(message)

    async def batch(self, events: Sequence[pb.RuntimeEvent]) -> None:
        """Several events in one RuntimeEvents message, whatever else is queued."""
        await self._outgoing.put(pb.ConnectRequest(events=pb.RuntimeEvents(events=events)))

    async def acked(self, attempt_id: str, seq: int, timeout: float = 10.0) -> None:
        """Wait until the server acknowledged ``seq`` (or more) of the attempt."""

        def covers(message: pb.ConnectResponse) -> bool:
            return any(a.attempt_id == attempt_id and a.seq >= seq for a in message.acks.acks)

        if any(m.WhichOneof("kind") == "acks" and covers(m) for m in self.seen):
            return
        # kept: one Acks message covers every attempt of a micro-batch, a later wait's too
        while True:
            message = await self.expect("acks", timeout)
            self.seen.append(message)
            if covers(message):
                return


def runtime_event(
    start: pb.Start,
    seq: int,
    kind: int,
    exit_code: int | None = None,
    payload: dict[str, Any] | None = None,
    token: str | None = None,
) -> pb.RuntimeEvent:
    """An event of the attempt of ``start``, with its callback token unless ``token``."""
    event = pb.RuntimeEvent(
        attempt_id=start.attempt_id,
        runtime_task_id=start.runtime_task_id,
        seq=seq,
        type=kind,  # type: ignore[arg-type]
        callback_token=start.callback_token if token is None else token,
    )
    if exit_code is not None:
        event.exit_code = exit_code
    if payload:
        body = struct_pb2.Struct()
        body.update(payload)
        event.payload.CopyFrom(body)
    return event
