"""When the services go away under an open stream, the SSE response ends (it never hangs on
heartbeats over a dead watch); once they are back, a reconnect with Last-Event-ID resumes
exactly after the last event received."""

from __future__ import annotations

import httpx
import pytest

from gateway.tokens import ApiTokens
from services.server import create_server
from tests.support.gateway_stack import ALL, TOKENS, GatewayStack, bearer
from tests.support.sse_client import open_stream

AUTH = bearer(ALL)
RUNS = "/v1/projects/proj-p/runs"


async def test_stream_ends_when_the_services_stop_and_resumes_after(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    body = {"owner_id": "alice", "task_id": "t", "requires_approval": True}
    run = (await http.post(RUNS, json=body, headers=AUTH)).json()
    path = f"{RUNS}/{run['id']}"
    port = int(stack.grpc_address.rsplit(":", 1)[1])

    async with open_stream(http, f"{path}/events:stream", AUTH) as stream:
        first = await stream.next_message()
        await stack.grpc_server.stop(None)
        with pytest.raises(EOFError):
            await stream.next_message(timeout=30)

    restarted, _ = await create_server(
        stack.app, f"127.0.0.1:{port}", stack.capacity, tokens=ApiTokens.parse(TOKENS)
    )
    try:
        approved = await http.post(f"{path}:approve", headers=AUTH)
        assert approved.status_code == 200, approved.text
        resume = {**AUTH, "Last-Event-ID": first.id}
        async with open_stream(http, f"{path}/events:stream", resume) as stream:
            following = await stream.next_message()
        assert int(following.id) == int(first.id) + 1
        listed = (await http.get(f"{path}/events", headers=AUTH)).json()["events"]
        assert following.json() == listed[int(first.id)]
    finally:
        await restarted.stop(None)
