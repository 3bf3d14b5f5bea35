"""Issue #11 §4 over a real gRPC stream and the real gateway, on SQLite and PostgreSQL:
credential-shaped text a runtime reports (output, an error summary) is stored redacted, and
no read (gRPC, REST) shows any of it; a run's secret env is a reference, never a value."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from google.protobuf import json_format
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from gateway.app import GatewayConfig
from gateway.server import HttpServer
from tests.support.auth import TEST_TOKEN, server_tokens
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime
from tests.support.secret_corpus import FORMATS, secret_part

API_TOKEN = TEST_TOKEN  # the gateway forwards it to the stack, which knows it
CORPUS = "\n".join(f"{name}: {value}" for name, value in FORMATS.items())


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url) as live:
        yield live


@pytest.fixture
async def rest(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    config = GatewayConfig(grpc_target=stack.address, tokens=server_tokens())
    server = HttpServer(config, "127.0.0.1:0")
    await server.start()
    try:
        headers = {"Authorization": f"Bearer {API_TOKEN}"}
        async with httpx.AsyncClient(
            base_url=f"http://{server.address}", headers=headers, timeout=30
        ) as client:
            yield client
    finally:
        await server.stop()


def _cut_in_halves(text: str) -> list[str]:
    """``text`` in pieces cut in the middle of every secret-looking value in it."""
    cuts = sorted(
        {at + len(value) // 2 for value in FORMATS.values() if (at := text.find(value)) >= 0}
        | {text.find("trtcb_") + 12}
    )
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if a < b]


def _leaks(text: str) -> list[str]:
    return [name for name, value in FORMATS.items() if secret_part(value) in text]


async def test_reported_secrets_never_reach_storage_or_any_read(
    stack: Stack, rest: httpx.AsyncClient
) -> None:
    request = rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="leaky")
    request.spec.update({"command": "deploy", "env": {"DB_PASSWORD": {"secret_ref": "db"}}})
    run_id = (await stack.runs.CreateRun(request)).run.id
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=1)
        start = (await runtime.expect("start")).start
        # the Start carries the reference, never a value
        sent = json_format.MessageToDict(start.spec)
        assert sent["env"]["DB_PASSWORD"] == {"secret_ref": "db"}
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
        # the command printed them, and the chunks cut every secret in two (its halves
        # arrive in different events, neither looks like a secret alone)
        chunks = _cut_in_halves(f"token {start.callback_token} in clear\n{CORPUS}\n")
        offset = 0
        for seq, chunk in enumerate(chunks, start=3):
            await runtime.event(
                start,
                seq,
                pb.RUNTIME_EVENT_TYPE_OUTPUT,
                payload={"data": chunk, "offset": offset},
            )
            offset += len(chunk.encode())
        last = 3 + len(chunks)
        failed = pb.RuntimeEvent(
            attempt_id=start.attempt_id,
            runtime_task_id=start.runtime_task_id,
            seq=last,
            type=pb.RUNTIME_EVENT_TYPE_FAILED,
            callback_token=start.callback_token,
            exit_code=1,
            error_code="EXIT_NONZERO",
            error_summary=f"deploy failed with {start.callback_token}: {CORPUS}"[:1900],
        )
        await runtime._outgoing.put(pb.ConnectRequest(event=failed))
        await runtime.acked(start.attempt_id, last)
    finally:
        await runtime.close()

    stored = await stack.app.store.list_events(run_id, 0, 500)
    pieces = await stack.app.store.read_output(start.attempt_id, 0, 10_000)
    output = "".join(piece.text for piece in pieces)
    text = json.dumps([e.payload for e in stored]) + str(await stack.app.store.load(run_id))
    assert _leaks(text + output) == [] and start.callback_token not in text + output
    assert "[redacted]" in output and "Slack webhook URL" in output  # the words around survive
    assert all(f"{name}: " in output for name in FORMATS)  # every line stored, none lost
    grpc_run = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
    grpc_events = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))
    grpc_output = await stack.runs.ReadRunOutput(rs.ReadRunOutputRequest(run_id=run_id))
    assert "".join(chunk.text for chunk in grpc_output.chunks) == output
    assert _leaks(str(grpc_run) + str(grpc_events)) == []
    got = await rest.get(f"/v1/projects/p/runs/{run_id}")
    events = await rest.get(f"/v1/projects/p/runs/{run_id}/events")
    assert got.status_code == 200 and events.status_code == 200
    assert _leaks(got.text + events.text) == [] and start.callback_token not in events.text
    read = await rest.get(f"/v1/projects/p/runs/{run_id}/output")
    assert read.status_code == 200 and "Slack webhook URL" in read.text
    assert _leaks(read.text) == [] and start.callback_token not in read.text
    assert got.json()["spec"]["env"]["DB_PASSWORD"] == {"secret_ref": "db"}


async def test_a_literal_secret_in_a_spec_is_refused_and_nothing_is_stored(
    stack: Stack, rest: httpx.AsyncClient
) -> None:
    body = {"owner_id": "alice", "task_id": "t", "spec": {"command": "m", "env": {"API_KEY": "k1"}}}
    refused = await rest.post("/v1/projects/p/runs", json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["reason"] == "INVALID_ARGUMENT"
    assert "secret_ref" in refused.json()["detail"]
    listed = await rest.get("/v1/projects/p/runs")
    assert listed.json().get("runs", []) == []
