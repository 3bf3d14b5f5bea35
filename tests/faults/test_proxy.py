"""The fault proxy itself, against a plain TCP echo server: pass, latency, blackhole (held
bytes delivered after it heals), reset (open and new connections), switched at runtime."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.faults.proxy import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except ConnectionResetError:  # the proxy reset us: that is the test
            pass


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with FaultProxy(server.server_address[:2], "echo") as fault_proxy:  # type: ignore[arg-type]
        yield fault_proxy
    server.shutdown()
    server.server_close()


def _connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection((proxy.host, proxy.port), timeout=5)


def _round_trip(sock: socket.socket, data: bytes = b"ping") -> float:
    began = time.monotonic()
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed"
        received += chunk
    assert received == data
    return time.monotonic() - began


def _refused(proxy: FaultProxy) -> bool:
    """A new connection is reset (at connect, or at the first exchange)."""
    try:
        with _connect(proxy) as sock:
            sock.sendall(b"new")
            return sock.recv(16) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_pass_forwards_both_ways(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        assert _round_trip(sock, b"x" * 200_000) < 2.0
    assert proxy.accepted == 1


def test_latency_delays_each_way_and_switches_back(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        fast = _round_trip(sock)
        proxy.latency(200)
        slow = _round_trip(sock)
        proxy.pass_through()
        again = _round_trip(sock)
    assert slow >= 0.4, f"200 ms each way, the round trip took {slow:.3f}s"
    assert fast < 0.2 and again < 0.2, (fast, again)


def test_blackhole_holds_then_delivers(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        _round_trip(sock)
        proxy.blackhole()
        sock.sendall(b"held")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(16)
        # a new connection is accepted and held too
        with _connect(proxy) as other:
            other.sendall(b"new")
            other.settimeout(0.5)
            with pytest.raises(TimeoutError):
                other.recv(16)
            proxy.pass_through()
            other.settimeout(5)
            assert other.recv(16) == b"new"
        sock.settimeout(5)
        assert sock.recv(16) == b"held"


def test_reset_kills_open_and_new_connections(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        _round_trip(sock)
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"after")
            sock.recv(16)
    assert _refused(proxy), "a new connection must be reset in reset mode"
    proxy.pass_through()
    with _connect(proxy) as sock:
        _round_trip(sock)


def test_reset_connections_once_keeps_passing(proxy: FaultProxy) -> None:
    with _connect(proxy) as first:
        _round_trip(first)
        assert proxy.reset_connections() == 1
        with pytest.raises(ConnectionResetError):
            first.sendall(b"after")
            first.recv(16)
    with _connect(proxy) as second:
        _round_trip(second)
    assert proxy.mode == "pass"
