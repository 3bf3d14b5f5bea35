"""RuntimeService over gRPC: one stream per runtime instance."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from truerun.v1 import runtime_service_pb2 as pb
from truerun.v1 import runtime_service_pb2_grpc

from coordinator.api import validation
from coordinator.api.errors import abort, unary
from coordinator.api.heartbeats import Heartbeats
from coordinator.api.runtime_stream import Stream, answered, trace
from coordinator.dispatch.capacity_port import ObservationReporter
from coordinator.dispatch.dispatcher import Dispatcher
from coordinator.dispatch.ingest import OUTCOMES, TERMINAL_TYPES, EventIngest
from coordinator.dispatch.sessions import Session, Sessions
from coordinator.dispatch.tokens import ANY_OWNER, RuntimeTokens
from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service.recovery import lose
from coordinator.service.transitions import Transitions
from kernel.errors import (
    DomainError,
    InstanceOfAnotherOwner,
    InvalidArgument,
    StoreBusy,
    Unauthenticated,
)
from kernel.ids import now_ms

log = logging.getLogger(__name__)
Ctx = grpc.aio.ServicerContext[Any, Any]

HEARTBEAT_INTERVAL_MS = 5_000
MAX_EVENTS_PER_CALL = 1_000


class RuntimeServicer(runtime_service_pb2_grpc.RuntimeServiceServicer):
    def __init__(
        self,
        tokens: RuntimeTokens,
        sessions: Sessions,
        ingest: EventIngest,
        dispatcher: Dispatcher,
        observations: ObservationReporter,
        transitions: Transitions,
    ) -> None:
        self._transitions = transitions
        self._reader = transitions.reader
        self._tokens = tokens
        self._sessions = sessions
        self._ingest = ingest
        self._dispatcher = dispatcher
        self._observations = observations
        self._streams: dict[int, Stream] = {}
        # several heartbeats per lease, so one lost heartbeat never expires a lease
        self._heartbeat_interval_ms = min(HEARTBEAT_INTERVAL_MS, dispatcher.lease_ttl_ms // 3)
        # a task accepted just after a heartbeat was composed is listed by the next one
        self._heartbeats = Heartbeats(
            sessions, dispatcher, observations, transitions, 2 * self._heartbeat_interval_ms
        )

    async def Connect(
        self, request_iterator: AsyncIterator[pb.ConnectRequest], context: Ctx
    ) -> AsyncIterator[pb.ConnectResponse]:
        try:
            first = await anext(request_iterator)
            session = self._hello(first)
            await self._bind(session)
            await self._replace_earlier(session)
        except StopAsyncIteration:
            return
        except DomainError as error:
            await abort(context, error)
        previous = self._sessions.open(session)
        if previous is not None:
            self._sessions.close(previous)
        yield pb.ConnectResponse(
            welcome=pb.Welcome(
                heartbeat_interval_ms=self._heartbeat_interval_ms,
                observation_ttl_ms=self._observations.ttl_ms,
            )
        )
        stream = Stream()
        stream.applier = asyncio.create_task(self._apply_batches(session, stream))
        stream.reader = asyncio.create_task(self._read(session, request_iterator, stream))
        dispatch = asyncio.create_task(self._dispatcher.serve(session))
        self._streams[id(session)] = stream
        try:
            while True:
                message = await session.outbox.get()
                if message is _CLOSE:
                    break
                if isinstance(message, DomainError):  # the reader refused what it read
                    await abort(context, message)
                yield message
        finally:
            self._streams.pop(id(session), None)
            self._sessions.close(session)
            for task in (stream.reader, stream.applier, dispatch):
                task.cancel()
            await asyncio.gather(stream.reader, stream.applier, dispatch, return_exceptions=True)

    async def drain(self) -> None:
        """Graceful shutdown (the gRPC server has stopped taking new calls, so runtimes
        reconnect to another replica): claim nothing more and let the Starts already sent get
        their answers; then on every stream read no further message, apply the events
        already read, send their acks, and end the stream. Events the runtime sent after
        that are unacknowledged and it sends them again to the next replica, where the
        per-attempt seq makes a repeat a no-op: none is lost, none applied twice."""
        await self._dispatcher.drain()
        streams = [(s, self._streams.get(id(s))) for s in self._sessions.all()]
        await asyncio.gather(
            *(self._end(session, stream) for session, stream in streams if stream is not None)
        )

    async def _end(self, session: Session, stream: Stream) -> None:
        stream.reader.cancel()
        await asyncio.gather(stream.reader, return_exceptions=True)
        if stream.handling is not None:
            await asyncio.gather(stream.handling, return_exceptions=True)
        stream.stopping = True
        stream.arrived.set()
        await asyncio.gather(stream.applier, return_exceptions=True)
        session.outbox.put_nowait(_CLOSE)

    def _hello(self, message: pb.ConnectRequest) -> Session:
        if message.WhichOneof("kind") != "hello":
            raise InvalidArgument("the first message on the stream must be a Hello")
        hello = message.hello
        owner = validation.name(hello.owner_id, "owner_id") or ""
        instance = validation.name(hello.runtime_instance_id, "runtime_instance_id") or ""
        devices = tuple(
            validation.name(r.device_id, "routes[].device_id") or "" for r in hello.routes
        )
        if not devices:
            raise InvalidArgument("a runtime names at least one route")
        binding = self._tokens.binding_of(hello.runtime_token)
        if binding is None or binding.owner not in (owner, ANY_OWNER):
            raise Unauthenticated(f"this runtime token may not act for owner {owner}")
        lineage = validation.name(hello.lineage, "lineage", required=False) or ""
        version = validation.printable(hello.agent_version, "agent_version", 128)
        return Session(
            owner,
            instance,
            devices,
            lineage,
            agent_version=version,
            accepts_batches=hello.accepts_batches,
            projects=binding.claimable_projects,
        )

    async def _bind(self, session: Session) -> None:
        """A runtime instance id belongs to the owner of the first Hello that named it: a
        Hello of another owner is refused before anything (it would take over that owner's
        stream, its Starts, Cancels and Inspects, and answer them)."""
        try:
            bound = await self._transitions.bind_instance(
                session.owner_id, session.runtime_instance_id, now_ms()
            )
        except Exception as error:
            log.exception("runtime instance %s not bound", session.runtime_instance_id)
            raise StoreBusy(f"the runtime instance could not be recorded: {error}") from error
        if bound != session.owner_id:
            log.warning(
                "Hello of owner %s naming runtime instance %s of another owner refused",
                session.owner_id,
                session.runtime_instance_id,
            )
            self._sessions.refused["hello_instance_of_another_owner"] += 1
            raise InstanceOfAnotherOwner(
                f"runtime instance {session.runtime_instance_id} belongs to another owner",
                runtime_instance_id=session.runtime_instance_id,
            )

    async def _replace_earlier(self, session: Session) -> None:
        """A Hello with a lineage replaces the lineage's earlier instances (the runtime
        promised one instance at a time, and tasks that end with their instance): their
        started attempts are provably gone, so each is lost, and the retry policy answers.
        Done before Welcome: a store failure refuses the stream (the runtime reconnects)
        and leaves nothing half done that the next Hello would not do again."""
        if not session.lineage:
            return
        owner, instance = session.owner_id, session.runtime_instance_id
        try:
            earlier = await self._transitions.record_lineage(
                owner, instance, session.lineage, now_ms()
            )
            for replaced in earlier:
                if self._sessions.get(replaced) is not None:
                    # Connected here right now: alive, so not replaced whatever it promised.
                    log.warning(
                        "lineage %s: %s is connected; not replaced", session.lineage, replaced
                    )
                    continue
                reason = f"instance_replaced: {replaced} by {instance} (lineage {session.lineage})"
                actor = Actor(ActorType.RUNTIME, instance)
                for attempt in await self._reader.started_attempts(owner, replaced):
                    command = c.MarkLost(attempt.run_id, actor, reason=reason)
                    try:
                        await lose(
                            self._transitions, command, actor, self._dispatcher.max_recoveries
                        )
                    except DomainError as error:  # it moved on meanwhile (e.g. finished)
                        log.info("attempt %s left as is: %s", attempt.id, error.message)
                if not await self._reader.started_attempts(owner, replaced):
                    await self._transitions.mark_replaced(owner, replaced, now_ms())
        except DomainError:
            raise
        except Exception as error:
            log.exception("lineage %s of %s not recorded", session.lineage, instance)
            raise StoreBusy(f"the runtime instance could not be recorded: {error}") from error

    async def _read(
        self, session: Session, requests: AsyncIterator[pb.ConnectRequest], stream: Stream
    ) -> None:
        """Reads the stream; events are applied in micro-batches by the applier task. A
        cancelled reader (drain) stops waiting for messages, but the message in hand is
        handled to its end (shielded; the drain waits for it), and closing is the drain's."""
        try:
            async for message in requests:
                stream.handling = asyncio.ensure_future(self._handle(session, stream, message))
                await asyncio.shield(stream.handling)
        except grpc.aio.AioRpcError:
            pass
        except InvalidArgument as refused:  # the stream ends with it; nothing of it applied
            session.outbox.put_nowait(refused)
            return
        except Exception:  # the stream ends; the runtime reconnects and resends
            log.exception("runtime stream of %s failed", session.runtime_instance_id)
        session.outbox.put_nowait(_CLOSE)

    async def _handle(self, session: Session, stream: Stream, message: pb.ConnectRequest) -> None:
        kind = message.WhichOneof("kind")
        if kind in ("events", "start_results"):
            self._bounded(session, kind, message)
        if kind == "event":
            stream.take(session, [message.event])
        elif kind == "events":  # the same buffer: one micro-batch covers single and batched
            stream.take(session, message.events.events)
        elif kind == "heartbeat":
            await self._heartbeats.handle(session, message.heartbeat)
        elif kind == "start_result":
            answered(session, [message.start_result])
        elif kind == "start_results":
            answered(session, message.start_results.results)
        elif kind == "inspect_result":
            # The events the runtime sent before its answer are applied first: the runtime
            # re-sends its unacknowledged events right after Welcome, and an answer must not
            # overtake them (a FINISHED would make the rest after-terminal, dropped).
            await stream.caught_up()
            await self._inspected(session, message.inspect_result)
        elif kind == "cancel_result":
            done = message.cancel_result  # its fields: %s of a message dumps it multi-line
            log.info("cancel of %s found=%s", done.attempt_id, done.found)

    def _bounded(self, session: Session, kind: str, message: pb.ConnectRequest) -> None:
        """A batch of more than MAX_EVENTS_PER_CALL items is refused whole, before any of it
        is buffered: the stream ends with INVALID_ARGUMENT (the SDK sends at most 256)."""
        items = message.events.events if kind == "events" else message.start_results.results
        if len(items) > MAX_EVENTS_PER_CALL:
            self._sessions.refused[f"{kind}_batch_too_large"] += 1
            log.warning(
                "%s of %d items from %s refused", kind, len(items), session.runtime_instance_id
            )
            raise InvalidArgument(f"{kind}: at most {MAX_EVENTS_PER_CALL} items per message")

    async def _inspected(self, session: Session, answer: pb.InspectResult) -> None:
        """A trusted answer from the attempt's own runtime, on its own authenticated stream,
        to an Inspect sent on that stream and not answered yet (an unsolicited answer is
        evidence of nothing)."""
        if not session.answered(answer.attempt_id):
            self._sessions.refused["inspect_answer_not_asked"] += 1
            log.warning(
                "inspect answer for %s from %s was not asked for; ignored",
                answer.attempt_id,
                session.runtime_instance_id,
            )
            return
        state = _INSPECT_STATES.get(answer.state)
        loaded = (await self._reader.load_attempts([answer.attempt_id])).get(answer.attempt_id)
        if state is None or loaded is None or loaded.attempt is None:
            return
        if (loaded.attempt.runtime_instance_id, loaded.attempt.owner_id) != (
            session.runtime_instance_id,
            session.owner_id,
        ):
            log.warning("inspect answer for %s from another runtime ignored", answer.attempt_id)
            return
        command = c.InspectAnswer(
            loaded.run.id,
            Actor(ActorType.RUNTIME, session.runtime_instance_id),
            attempt_id=answer.attempt_id,
            runtime_task_id=answer.runtime_task_id,
            state=state,
            turn_active=_TURNS.get(answer.turn_status),
            outcome=OUTCOMES.get(answer.terminal_type),
            exit_code=answer.exit_code if answer.HasField("exit_code") else None,
            last_seq=answer.last_seq,
            max_recoveries=self._dispatcher.max_recoveries,
        )
        # "not found": lost, and the retry policy answers in the same transaction
        retrier = Actor(ActorType.SCHEDULER, f"dispatcher:{session.runtime_instance_id}")
        try:
            await lose(self._transitions, command, retrier, self._dispatcher.max_recoveries)
        except DomainError as error:
            log.info("inspect answer for %s not applied: %s", answer.attempt_id, error.message)

    async def _apply_batches(self, session: Session, stream: Stream) -> None:
        buffered = stream.buffered
        while not session.closed:
            if not stream.stopping:
                await stream.arrived.wait()
            stream.arrived.clear()
            batch = buffered[:MAX_EVENTS_PER_CALL]  # one transaction stays bounded
            del buffered[: len(batch)]
            if buffered:
                stream.arrived.set()  # the rest in the next micro-batch
            if not batch:
                if stream.stopping:
                    return
                continue
            began = time.time_ns()
            try:
                ingested = await self._ingest.ingest(
                    session.runtime_instance_id, batch, session.owner_id
                )
            except Exception:
                # Nothing of the batch is acknowledged: end the stream, so the runtime
                # reconnects and sends the events again.
                log.exception("events of %s not applied", session.runtime_instance_id)
                session.outbox.put_nowait(_CLOSE)
                return
            stream.applied(len(batch))
            if ingested.refused:
                self._sessions.refused["event_not_authorized"] += ingested.refused
            acks = [pb.Ack(attempt_id=a, seq=seq) for a, seq in ingested.acks.items()]
            if acks:
                session.send(pb.ConnectResponse(acks=pb.Acks(acks=acks)))
            trace(batch, began)
            if any(event.type in TERMINAL_TYPES for event in batch):
                session.wake.set()

    @unary
    async def ReportEvents(
        self, request: pb.ReportEventsRequest, context: Ctx
    ) -> pb.ReportEventsResponse:
        instance = validation.name(request.runtime_instance_id, "runtime_instance_id") or ""
        if len(request.events) > MAX_EVENTS_PER_CALL:
            raise InvalidArgument(f"at most {MAX_EVENTS_PER_CALL} events per call")
        owner = self._tokens.owner_of(request.runtime_token)
        if owner is None:
            raise Unauthenticated("unknown runtime token")
        ingested = await self._ingest.ingest(instance, list(request.events), owner)
        return pb.ReportEventsResponse(
            acks=[pb.Ack(attempt_id=a, seq=s) for a, s in ingested.acks.items()]
        )


_CLOSE: Any = object()
_INSPECT_STATES = {
    pb.INSPECT_STATE_RUNNING: c.InspectState.RUNNING,
    pb.INSPECT_STATE_ACCEPTED: c.InspectState.ACCEPTED,
    pb.INSPECT_STATE_FINISHED: c.InspectState.FINISHED,
    pb.INSPECT_STATE_NOT_FOUND: c.InspectState.NOT_FOUND,
    pb.INSPECT_STATE_LOST: c.InspectState.LOST,
    pb.INSPECT_STATE_NEVER_RECEIVED: c.InspectState.NEVER_RECEIVED,
}
_TURNS = {pb.TURN_STATUS_ACTIVE: True, pb.TURN_STATUS_IDLE: False}
