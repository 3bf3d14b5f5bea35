"""The runtime's end of RuntimeService.Connect: hello, heartbeats, events, commands, acks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

import grpc
from truerun.v1 import capacity_service_pb2 as cpb
from truerun.v1 import runtime_service_pb2 as pb
from truerun.v1 import runtime_service_pb2_grpc

from . import _contact
from ._api import Backoff, RuntimeHandler
from ._outbox import Outbox
from ._stream import Batcher, StreamSession

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_MS = 10_000
_REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class RuntimeClient:
    """Holds one Connect stream to truerun, reconnecting with bounded, jittered backoff.

    Every event goes through ``outbox`` (on disk first); on each new stream every
    unacknowledged event is sent again in seq order, and events appended later follow.
    """

    def __init__(
        self,
        address: str,
        token: str,
        owner_id: str,
        runtime_instance_id: str,
        routes: Sequence[cpb.Route],
        handler: RuntimeHandler,
        *,
        outbox: Outbox,
        agent_version: str = "",
        lineage: str = "",
        backoff: Backoff | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        keepalive_ms: int = 30_000,
        welcome_timeout_s: float = 10.0,
    ) -> None:
        self.address = address
        self.owner_id = owner_id
        self.runtime_instance_id = runtime_instance_id
        self.routes = [cpb.Route(device_id=r.device_id, kind=r.kind) for r in routes]
        self._token = token
        self._handler = handler
        self.outbox = outbox
        self._agent_version = agent_version
        self._lineage = lineage
        self._backoff = backoff or Backoff()
        self._welcomed = False  # the current (or last) stream got its Welcome
        self._credentials = credentials
        self._keepalive_ms = keepalive_ms
        self._welcome_timeout_s = welcome_timeout_s
        self._session: StreamSession | None = None
        self._stopping = asyncio.Event()
        self._heartbeat_now = asyncio.Event()
        self._connected = asyncio.Event()
        self._contact_path = outbox.directory / _contact.CONTACT_FILE
        self._down_since = time.monotonic() - _contact.seconds_since(self._contact_path)
        self.sessions_opened = 0
        #: Why truerun refused this runtime for good (UNAUTHENTICATED, PERMISSION_DENIED);
        #: ``run()`` then returns instead of retrying.
        self.refused = ""
        outbox.subscribe(self._on_event)

    # -- public ----------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._session is not None

    def unreachable_ms(self) -> int:
        """How long truerun could not be reached (0 while a stream is up). Counted from the
        last contact recorded in the outbox directory, so it survives a restart."""
        if self._session is not None:
            return 0
        return int((time.monotonic() - self._down_since) * 1000)

    async def wait_connected(self) -> None:
        await self._connected.wait()

    def request_heartbeat(self) -> None:
        """Send a heartbeat now (capacity changed) instead of at the next interval."""
        self._heartbeat_now.set()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Connect and reconnect until ``stop()``."""
        failures = 0
        while not self._stopping.is_set():
            try:
                welcomed = await self._connect_once()
            except grpc.aio.AioRpcError as error:
                if error.code() in _REFUSALS:
                    # a wrong token or another owner's instance: retrying cannot help
                    self.refused = _describe(error)
                    log.error("truerun refused this runtime: %s", self.refused)
                    self._stopping.set()
                    break
                welcomed = False
                log.warning("runtime stream to %s failed: %s", self.address, _describe(error))
            except (TimeoutError, ConnectionError) as error:
                welcomed = False
                log.warning("runtime stream to %s failed: %s", self.address, _describe(error))
            except Exception:  # a bug or a full disk: log it, keep trying (events stay on disk)
                welcomed = False
                log.exception("runtime stream to %s broke", self.address)
            # a stream that got its Welcome was healthy: its end (an error too, as when the
            # server dies) starts the backoff again from the first delay
            failures = 0 if welcomed or self._welcomed else failures + 1
            if self._stopping.is_set():
                break
            delay = self._backoff.delay(max(1, failures))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def report_events(self, *, batch_size: int = 100, timeout_s: float = 10.0) -> int:
        """Send the unacknowledged events with the unary ReportEvents (for a runtime that cannot
        hold a stream) and apply the acks; returns how many events were acknowledged."""
        acked = 0
        async with self._channel() as channel:
            stub = runtime_service_pb2_grpc.RuntimeServiceStub(channel)
            pending = self.outbox.unacked()
            for start in range(0, len(pending), batch_size):
                request = pb.ReportEventsRequest(
                    runtime_token=self._token,
                    runtime_instance_id=self.runtime_instance_id,
                    events=pending[start : start + batch_size],
                )
                response = await stub.ReportEvents(request, timeout=timeout_s)
                for ack in response.acks:
                    before = self.outbox.acked_seq(ack.attempt_id)
                    if self.outbox.ack(ack.attempt_id, ack.seq):
                        acked += self.outbox.acked_seq(ack.attempt_id) - before
        return acked

    # -- one stream ------------------------------------------------------------------------

    def _channel(self) -> grpc.aio.Channel:
        # Keepalive pings notice a dead server (self-fencing depends on it); the server must
        # allow them (grpc.http2.min_recv_ping_interval_without_data_ms <= keepalive_ms), or
        # it answers with GOAWAY "too_many_pings". 0 turns them off.
        options: list[tuple[str, int]] = []
        if self._keepalive_ms > 0:
            options = [
                ("grpc.keepalive_time_ms", self._keepalive_ms),
                ("grpc.keepalive_timeout_ms", max(1000, self._keepalive_ms // 2)),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
                # grpcio 1.85 bounds an unanswered ping by this, not by keepalive_timeout_ms:
                # without it a blackholed stream stayed "up" for over 30 s and self-fencing
                # started that much later (tests/faults/test_partition.py).
                ("grpc.http2.ping_timeout_ms", max(1000, self._keepalive_ms // 2)),
            ]
        if self._credentials is not None:
            return grpc.aio.secure_channel(self.address, self._credentials, options=options)
        return grpc.aio.insecure_channel(self.address, options=options)

    async def _connect_once(self) -> bool:
        """One stream, from Hello to its end; True when it got as far as a Welcome and ended
        cleanly (``_welcomed`` tells whether it got one, however it ended)."""
        self._welcomed = False
        async with self._channel() as channel:
            stub = runtime_service_pb2_grpc.RuntimeServiceStub(channel)
            call = stub.Connect(None)
            session = StreamSession()
            session.queue.put_nowait(pb.ConnectRequest(hello=self._hello()))
            writer = asyncio.create_task(self._write(call, session))
            stopper = asyncio.create_task(self._stopping.wait())
            try:
                first = await self._welcome(call, stopper)
                if first is None:
                    return False
                if not isinstance(first, pb.ConnectResponse) or not first.HasField("welcome"):
                    log.warning("runtime stream: no Welcome from %s", self.address)
                    return False
                self._opened(session, first.welcome)
                self._welcomed = True
                heartbeats = asyncio.create_task(self._heartbeats(session, first.welcome))
                try:
                    await self._read(call, session, writer, stopper)
                finally:
                    heartbeats.cancel()
                    await asyncio.gather(heartbeats, return_exceptions=True)
                return True
            finally:
                self._closed(session)
                session.queue.put_nowait(None)
                stopper.cancel()
                call.cancel()
                await asyncio.gather(writer, stopper, return_exceptions=True)

    async def _welcome(
        self,
        call: grpc.aio.StreamStreamCall[pb.ConnectRequest, pb.ConnectResponse],
        stopper: asyncio.Task[bool],
    ) -> object | None:
        """The server's first message; None when the client stops first."""
        reader = asyncio.ensure_future(call.read())
        done, _ = await asyncio.wait(
            {reader, stopper}, timeout=self._welcome_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if reader in done:
            return reader.result()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        if stopper in done:
            return None
        raise TimeoutError(f"no Welcome within {self._welcome_timeout_s} s")

    def _hello(self) -> pb.Hello:
        return pb.Hello(
            runtime_token=self._token,
            owner_id=self.owner_id,
            runtime_instance_id=self.runtime_instance_id,
            routes=self.routes,
            agent_version=self._agent_version,
            lineage=self._lineage,
            accepts_batches=True,  # reads Starts (_dispatch)
        )

    def _opened(self, session: StreamSession, welcome: pb.Welcome) -> None:
        """The stream is up: re-send every unacknowledged event before anything else."""
        self._session = session
        self.sessions_opened += 1
        self._connected.set()
        _contact.record(self._contact_path)
        for event in self.outbox.unacked():
            session.send_event(event)
        log.info(
            "runtime stream to %s open (heartbeat %d ms)",
            self.address,
            welcome.heartbeat_interval_ms,
        )

    def _closed(self, session: StreamSession) -> None:
        if self._session is session:
            self._session = None
            self._connected.clear()
            self._down_since = time.monotonic()
            _contact.record(self._contact_path)

    async def _write(
        self,
        call: grpc.aio.StreamStreamCall[pb.ConnectRequest, pb.ConnectResponse],
        session: StreamSession,
    ) -> None:
        batcher = Batcher(session.queue)
        while (message := await batcher.next()) is not None:
            await call.write(message)

    async def _read(
        self,
        call: grpc.aio.StreamStreamCall[pb.ConnectRequest, pb.ConnectResponse],
        session: StreamSession,
        writer: asyncio.Task[None],
        stopper: asyncio.Task[bool],
    ) -> None:
        while True:
            reader = asyncio.ensure_future(call.read())
            done, _ = await asyncio.wait(
                {reader, writer, stopper}, return_when=asyncio.FIRST_COMPLETED
            )
            if reader not in done:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                failure = writer.exception() if writer in done else None
                if failure is not None:
                    raise failure
                return
            message = reader.result()
            if not isinstance(message, pb.ConnectResponse):  # EOF: the server ended the stream
                return
            await self._dispatch(message, session)

    async def _dispatch(self, message: pb.ConnectResponse, session: StreamSession) -> None:
        kind = message.WhichOneof("kind")
        if kind == "ack":
            self.outbox.ack(message.ack.attempt_id, message.ack.seq)
        elif kind == "acks":
            for ack in message.acks.acks:
                self.outbox.ack(ack.attempt_id, ack.seq)
        elif kind == "start":
            await self._on_start(message.start, session)
        elif kind == "starts":  # a claim round's Starts: one after another, each as a single
            for start in message.starts.starts:
                await self._on_start(start, session)
        elif kind == "cancel":
            cancel_result = await self._call_cancel(message.cancel)
            session.queue.put_nowait(pb.ConnectRequest(cancel_result=cancel_result))
        elif kind == "inspect":
            inspect_result = await self._call_inspect(message.inspect)
            session.queue.put_nowait(pb.ConnectRequest(inspect_result=inspect_result))

    async def _on_start(self, start: pb.Start, session: StreamSession) -> None:
        result = await self._start(start, session)
        session.queue.put_nowait(pb.ConnectRequest(start_result=result))
        for event in session.held.pop(start.attempt_id, []):
            session.send_event(event)

    async def _start(self, start: pb.Start, session: StreamSession) -> pb.StartResult:
        """The StartResult goes out before the attempt's first events (held until then)."""
        session.held[start.attempt_id] = []
        try:
            return await self._handler.on_start(start)
        except Exception as error:
            log.exception("Start of attempt %s failed in the handler", start.attempt_id)
            held = session.held.get(start.attempt_id) or []
            return pb.StartResult(
                attempt_id=start.attempt_id,
                runtime_task_id=start.runtime_task_id,
                accepted=bool(held),  # its ACCEPTED event was written: it is accepted
                reason="" if held else f"runtime error: {type(error).__name__}",
                seq=held[0].seq if held else 0,
            )

    async def _call_cancel(self, cancel: pb.Cancel) -> pb.CancelResult:
        try:
            return await self._handler.on_cancel(cancel)
        except Exception:
            log.exception("Cancel of attempt %s failed in the handler", cancel.attempt_id)
            return pb.CancelResult(
                attempt_id=cancel.attempt_id, runtime_task_id=cancel.runtime_task_id, found=False
            )

    async def _call_inspect(self, inspect: pb.Inspect) -> pb.InspectResult:
        try:
            return await self._handler.on_inspect(inspect)
        except Exception:
            log.exception("Inspect of attempt %s failed in the handler", inspect.attempt_id)
            return pb.InspectResult(
                attempt_id=inspect.attempt_id, runtime_task_id=inspect.runtime_task_id
            )

    def _on_event(self, event: pb.RuntimeEvent) -> None:
        if self._session is not None:
            self._session.send_event(event)

    # -- heartbeats ------------------------------------------------------------------------

    async def _heartbeats(self, session: StreamSession, welcome: pb.Welcome) -> None:
        interval_s = (welcome.heartbeat_interval_ms or DEFAULT_HEARTBEAT_MS) / 1000
        while True:
            self._heartbeat_now.clear()
            try:
                observation = self._observation()
            except Exception:
                log.exception("the runtime's observation failed; heartbeat skipped")
            else:
                session.queue.put_nowait(
                    pb.ConnectRequest(heartbeat=pb.Heartbeat(observation=observation))
                )
                _contact.record(self._contact_path)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), interval_s)

    def _observation(self) -> cpb.Observation:
        observation = self._handler.observe()
        if not observation.owner_id:
            observation.owner_id = self.owner_id
        if not observation.runtime_instance_id:
            observation.runtime_instance_id = self.runtime_instance_id
        if not observation.routes:
            observation.routes.extend(self.routes)
        if not observation.HasField("observe_time"):
            observation.observe_time.GetCurrentTime()
        return observation


def _describe(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return repr(error) or type(error).__name__
