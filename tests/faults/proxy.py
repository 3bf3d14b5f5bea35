"""A TCP fault proxy of the project's own, for PostgreSQL, Redis and gRPC on loopback.

One listening port forwards to one upstream. The test switches the mode at any time:

- ``pass``: bytes flow as they arrive;
- ``latency``: every chunk is delivered ``latency_ms`` after it arrived, each way (ordering
  and throughput kept: chunks queue, they are not read late);
- ``blackhole``: connections are accepted and held; nothing is forwarded either way, new
  connections are not connected upstream. Held bytes are delivered when the mode changes
  back, as TCP would retransmit them after a partition heals;
- ``reset``: every open connection is reset (RST on both sides) and new ones are reset as
  soon as they are accepted.

``reset_connections()`` resets the open connections once and keeps the mode. The event loop
runs in a thread of its own, so a synchronous test drives it with plain calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

Mode = Literal["pass", "latency", "blackhole", "reset"]
MODES: tuple[Mode, ...] = ("pass", "latency", "blackhole", "reset")
CHUNK = 65536
T = TypeVar("T")


@dataclass(eq=False)
class _Connection:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                _rst(writer)
        for task in self.tasks:
            task.cancel()


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0: the peer sees a connection reset, not an orderly FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """``FaultProxy(("127.0.0.1", 5432)).start()``; ``address`` is where clients connect."""

    def __init__(self, upstream: tuple[str, int], name: str = "proxy") -> None:
        self.upstream = upstream
        self.name = name
        self.mode: Mode = "pass"
        self.latency_ms = 0
        self.accepted = 0  # connections accepted so far (tests read it to see reconnects)
        self.resets = 0  # connections reset so far
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._open: asyncio.Event | None = None  # set while not blackholed
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def close(self) -> None:
        """Stop listening and reset every connection; idempotent. The event loop is closed
        in every case (a proxy that never started, a shutdown that timed out), so its
        self-pipe never leaks into a later test as an unraisable ResourceWarning."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._call(self._shutdown(), timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def address(self) -> str:
        """``host:port`` to connect to instead of the upstream."""
        return f"{self.host}:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    # -- switching -------------------------------------------------------------------------

    def set_mode(self, mode: Mode, latency_ms: int = 200) -> None:
        """Switch at once; returns when the switch (and any reset) is done."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        self._call(self._switch(mode, latency_ms))

    def pass_through(self) -> None:
        self.set_mode("pass")

    def latency(self, ms: int = 200) -> None:
        self.set_mode("latency", ms)

    def blackhole(self) -> None:
        self.set_mode("blackhole")

    def reset(self) -> None:
        self.set_mode("reset")

    def reset_connections(self) -> int:
        """Reset every open connection once, keep the mode; how many were reset."""
        return self._call(self._reset_all())

    # -- inside the loop -------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._reset_all()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _switch(self, mode: Mode, latency_ms: int) -> None:
        assert self._open is not None
        self.mode = mode
        self.latency_ms = latency_ms if mode == "latency" else 0
        if mode == "blackhole":
            self._open.clear()
        else:
            self._open.set()
        if mode == "reset":
            await self._reset_all()

    async def _reset_all(self) -> int:
        connections = list(self._connections)
        for connection in connections:
            connection.reset()
        self._connections.difference_update(connections)
        self.resets += len(connections)
        return len(connections)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # asyncio logs a cancelled connection handler as an error: closing cancels them all.
        with contextlib.suppress(asyncio.CancelledError):
            await self._serve(reader, writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        self.accepted += 1
        if self.mode == "reset":
            self.resets += 1
            _rst(writer)
            return
        connection = _Connection(writer)
        self._connections.add(connection)
        try:
            await self._open.wait()  # blackholed: accepted and held, nothing connects upstream
            if connection not in self._connections:  # reset while held
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                _rst(writer)
                return
            connection.upstream = up_writer
            if connection not in self._connections:
                connection.reset()
                return
            connection.tasks = [
                asyncio.create_task(self._direction(reader, up_writer)),
                asyncio.create_task(self._direction(up_reader, writer)),
            ]
            await asyncio.gather(*connection.tasks, return_exceptions=True)
        finally:
            if connection in self._connections:
                self._connections.discard(connection)
                for end in (connection.client, connection.upstream):
                    if end is not None:
                        end.close()

    async def _direction(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read as fast as bytes come (stamping arrival), deliver by the mode."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        deliver = asyncio.create_task(self._deliver(queue, writer))
        try:
            while True:
                try:
                    data = await reader.read(CHUNK)
                except OSError:
                    # This side was reset (e.g. a SIGKILLed process with unread data): reset
                    # the other side too, as a direct connection would be, or a PostgreSQL
                    # backend would sit idle in its transaction holding locks forever.
                    _rst(writer)
                    return
                queue.put_nowait((time.monotonic(), data))
                if not data:
                    break
            await deliver
        finally:
            deliver.cancel()

    async def _deliver(
        self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        assert self._open is not None
        while True:
            arrived, data = await queue.get()
            await self._open.wait()
            if self.latency_ms:
                delay = arrived + self.latency_ms / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._open.wait()  # blackholed while the chunk was in flight
            if not data:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
