"""Every REST error is application/problem+json, on a connection the server keeps (issue 37):
a time a Timestamp cannot hold is a 400 problem (it was a text/plain 500 and a reset
connection), and an exception no handler expected is a 500 problem with reason INTERNAL and
no traceback in the body (gateway/catch_all.py), after which the same connection answers the
next request. Requests go over one raw HTTP/1.1 connection, so "kept" is observed, not
assumed."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import uvicorn
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.app import GatewayConfig, create_app
from gateway.tokens import ApiTokens
from tests.support.gateway_stack import ALL, TOKENS, GatewayStack

PROBLEM = "application/problem+json"


class Connection:
    """One HTTP/1.1 connection: requests in turn, each answer read whole (Content-Length or
    chunked)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def get(self, target: str, token: str = ALL) -> tuple[int, dict[str, str], bytes]:
        request = f"GET {target} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {token}\r\n\r\n"
        self._writer.write(request.encode())
        await self._writer.drain()
        head = await asyncio.wait_for(self._reader.readuntil(b"\r\n\r\n"), 30)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        if "content-length" in headers:
            body = await self._reader.readexactly(int(headers["content-length"]))
        else:
            assert headers.get("transfer-encoding") == "chunked", headers
            body = b""
            while size := int((await self._reader.readuntil(b"\r\n")).strip(), 16):
                body += await self._reader.readexactly(size)
                await self._reader.readexactly(2)
            await self._reader.readexactly(2)
        return status, headers, body


@asynccontextmanager
async def connection(base_url: str) -> AsyncIterator[Connection]:
    host, _, port = base_url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield Connection(reader, writer)
    finally:
        writer.close()


def _problem(answer: tuple[int, dict[str, str], bytes], status: int, reason: str) -> Any:
    code, headers, body = answer
    assert code == status, (code, body)
    assert headers["content-type"].startswith(PROBLEM), headers
    document = json.loads(body)
    assert document["status"] == status and document["reason"] == reason, document
    assert {"type", "title", "detail"} <= set(document)
    return document


async def test_a_time_a_timestamp_cannot_hold_is_a_400_problem(stack: GatewayStack) -> None:
    """The finding's repro, 0001-01-01T00:00:00+03:04 (before 0001-01-01T00:00:00Z), and its
    twin past 9999-12-31Z, on the list and the count; the connection then answers on."""
    async with connection(stack.base_url) as http:
        for name in ("create_time_from", "create_time_to"):
            for moment in ("0001-01-01T00:00:00+03:04", "9999-12-31T23:59:59-05:00"):
                for path in ("runs", "runs:count"):
                    target = f"/v1/projects/proj-p/{path}?{name}={quote(moment)}"
                    problem = _problem(await http.get(target), 400, "INVALID_ARGUMENT")
                    assert name in problem["detail"], problem
        # times a Timestamp holds reach the services, which take 1970 on
        status, _, body = await http.get(
            f"/v1/projects/proj-p/runs?create_time_from={quote('0001-01-01T00:00:00Z')}"
        )
        _problem((status, _, body), 400, "INVALID_ARGUMENT")
        assert b"before 1970" in body, body
        for name, moment in (("from", "1970-01-01T00:00:00Z"), ("to", "9999-12-31T23:59:59Z")):
            target = f"/v1/projects/proj-p/runs?create_time_{name}={quote(moment)}"
            status, _, body = await http.get(target)
            assert status == 200 and json.loads(body)["runs"] == [], body
        status, _, body = await http.get("/healthz")
        assert status == 200, body


async def _raises(request: Request) -> Response:
    raise RuntimeError("an unexpected bug with a secret-ish detail: hunter2")


async def _fails_mid_stream(request: Request) -> Response:
    async def events() -> AsyncIterator[str]:
        yield "event: first\ndata: {}\n\n"
        raise RuntimeError("the stream broke")

    return StreamingResponse(events(), media_type="text/event-stream")


@asynccontextmanager
async def _served_with_bug_routes() -> AsyncIterator[str]:
    """The real gateway app (create_app: its middleware and routes) with two routes in front
    that fail as a bug would, served by uvicorn on loopback. Nothing behind the gateway is
    called, so its upstream is an address nobody serves."""
    app = create_app(GatewayConfig(grpc_target="127.0.0.1:9", tokens=ApiTokens.parse(TOKENS)))
    app.router.routes[:0] = [Route("/v1/bug", _raises), Route("/v1/bug:stream", _fails_mid_stream)]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not task.done(), "uvicorn stopped before it started"
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


async def test_an_unexpected_exception_is_a_500_problem_on_a_kept_connection() -> None:
    async with _served_with_bug_routes() as base_url, connection(base_url) as http:
        for _ in range(3):  # the same connection, again and again
            answer = await http.get("/v1/bug")
            problem = _problem(answer, 500, "INTERNAL")
            assert "Traceback" not in answer[2].decode() and "hunter2" not in problem["detail"]
            status, _, body = await http.get("/healthz")
            assert (status, json.loads(body)) == (200, {"status": "ok"})
        # a stream that fails after its first event ends cleanly: the event arrives whole and
        # the connection answers the next request
        status, headers, body = await http.get("/v1/bug:stream")
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        assert body == b"event: first\ndata: {}\n\n"
        status, _, _ = await http.get("/healthz")
        assert status == 200
