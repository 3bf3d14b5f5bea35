"""The gRPC server interceptor (services/rpc_metrics.py) on a real loopback server: calls
counted by service, method and status code (an abort's code, a stream the caller closed),
timed, a method the server does not serve left out (its path is the caller's choice), and the
caller's request id (sent by kernel/telemetry's client interceptor from its log context) on
the server's log context for the call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from truerun.v1 import run_service_pb2

from kernel import logs
from kernel.telemetry import client_interceptors
from services.rpc_metrics import RpcMetrics

SERVICE = "t.v1.Probe"
seen: list[str] = []


async def _echo(request: bytes, context: Any) -> bytes:
    seen.append(logs.current().get("request_id", ""))
    if request == b"missing":
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
    return request


async def _fields(request: run_service_pb2.WatchRunEventsRequest, context: Any) -> bytes:
    current = logs.current()
    return f"{current.get('project')}/{current.get('run_id')}".encode()


async def _ticks(request: bytes, context: Any) -> AsyncIterator[bytes]:
    for n in range(1000):
        yield str(n).encode()
        await asyncio.sleep(0.01)


def _handled(registry: CollectorRegistry, method: str, code: str) -> float | None:
    labels = {"service": SERVICE, "method": method, "code": code}
    return registry.get_sample_value("truerun_grpc_server_handled_total", labels)


async def test_calls_are_counted_by_code_and_carry_the_callers_request_id() -> None:
    registry = CollectorRegistry()
    server = grpc.aio.server(interceptors=[RpcMetrics(registry).interceptor()])
    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(_echo),
        "Ticks": grpc.unary_stream_rpc_method_handler(_ticks),
        "Fields": grpc.unary_unary_rpc_method_handler(
            _fields, request_deserializer=run_service_pb2.WatchRunEventsRequest.FromString
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", interceptors=client_interceptors()
        ) as channel:
            echo = channel.unary_unary(f"/{SERVICE}/Echo", None, None)
            with logs.bound(request_id="req-from-gateway"):
                assert await echo(b"hi", timeout=5) == b"hi"
            assert await echo(b"plain", timeout=5) == b"plain"  # no id: the server makes one
            fields = channel.unary_unary(f"/{SERVICE}/Fields", None, None)
            named = run_service_pb2.WatchRunEventsRequest(project_id="proj-a", run_id="run-1")
            assert await fields(named.SerializeToString(), timeout=5) == b"proj-a/run-1"
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await echo(b"missing", timeout=5)
            assert missing.value.code() is grpc.StatusCode.NOT_FOUND
            with pytest.raises(grpc.aio.AioRpcError) as unserved:
                await channel.unary_unary(f"/{SERVICE}/Nope", None, None)(b"x", timeout=5)
            assert unserved.value.code() is grpc.StatusCode.UNIMPLEMENTED
            stream = channel.unary_stream(f"/{SERVICE}/Ticks", None, None)(b"", timeout=5)
            assert await stream.read() == b"0"
            stream.cancel()
            deadline = asyncio.get_running_loop().time() + 5
            while _handled(registry, "Ticks", "CANCELLED") != 1:  # counted when it ends
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
    finally:
        await server.stop(None)
    assert seen[0] == "req-from-gateway"
    assert seen[1] and seen[1] != "req-from-gateway"
    assert _handled(registry, "Echo", "OK") == 2
    assert _handled(registry, "Echo", "NOT_FOUND") == 1
    assert _handled(registry, "Nope", "UNIMPLEMENTED") is None  # not a label value, ever
    count = registry.get_sample_value(
        "truerun_grpc_server_handling_seconds_count", {"service": SERVICE, "method": "Echo"}
    )
    assert count == 3
