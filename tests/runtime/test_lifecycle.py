"""Start -> accepted -> running -> output -> terminal, over real gRPC with real processes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.support.fake_runtime_server import FakeRuntimeServer, task_id

T = pb.RuntimeEventType


def assert_gapless(server: FakeRuntimeServer, attempt_id: str) -> list[pb.RuntimeEvent]:
    events = server.events(attempt_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert not server.gaps
    return events


async def test_success_streams_output_with_gapless_seqs(
    server: FakeRuntimeServer, start_agent: StartAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRUERUN_TOKEN", "the-runtime-secret")  # never passed to commands
    await start_agent()
    session = await server.connected()
    command = (
        'echo hello; echo oops >&2; echo "$TRUERUN_ATTEMPT_ID $TRUERUN_RUN_ID '
        '$TRUERUN_CALLBACK_TOKEN"; test -z "$TRUERUN_TOKEN"'
    )
    result = await server.start("a1", {"command": command})
    assert result.accepted and result.seq == 1
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="terminal")

    events = assert_gapless(server, "a1")
    types = [e.type for e in events]
    assert types[:2] == [pb.RUNTIME_EVENT_TYPE_ACCEPTED, pb.RUNTIME_EVENT_TYPE_RUNNING]
    assert set(types[2:-1]) == {pb.RUNTIME_EVENT_TYPE_OUTPUT}
    assert terminal is events[-1] and terminal.type == pb.RUNTIME_EVENT_TYPE_SUCCEEDED
    assert terminal.exit_code == 0
    assert events[1].turn_status == pb.TURN_STATUS_ACTIVE
    assert all(e.callback_token == "cb-a1" and e.runtime_task_id == task_id("a1") for e in events)
    assert server.output("a1") == "hello\noops\na1 run-a1 cb-a1\n"

    log = Path(terminal.payload["log_path"])
    data = log.read_bytes()
    assert terminal.payload["log_size"] == len(data)
    assert terminal.payload["log_sha256"] == hashlib.sha256(data).hexdigest()

    kinds = [m.WhichOneof("kind") for m in session.received]
    first_event = next(i for i, m in enumerate(session.received) if m.HasField("event"))
    assert kinds.index("start_result") < first_event, "StartResult precedes the first event"


async def test_nonzero_exit_fails_with_its_exit_code(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    await start_agent()
    await server.connected()
    assert (await server.start("a1", {"argv": ["sh", "-c", "echo bad; exit 3"]})).accepted
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    assert terminal.type == pb.RUNTIME_EVENT_TYPE_FAILED
    assert terminal.exit_code == 3 and terminal.error_code == "EXIT_NONZERO"
    assert server.output("a1") == "bad\n"
    assert_gapless(server, "a1")


async def test_exec_failure_fails_without_running(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    await start_agent()
    await server.connected()
    assert (await server.start("a1", {"argv": ["/nonexistent/truerun-test"]})).accepted
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    assert terminal.type == pb.RUNTIME_EVENT_TYPE_FAILED
    assert terminal.error_code == "SPAWN_FAILED" and terminal.exit_code == 127
    assert pb.RUNTIME_EVENT_TYPE_RUNNING not in server.types("a1")


async def test_bad_spec_is_refused_before_anything_starts(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    running = await start_agent()
    await server.connected()
    result = await server.start("a1", {"cmd": "true"})
    assert not result.accepted and "command" in result.reason
    inspect = await server.inspect("a1")
    assert inspect.state == pb.INSPECT_STATE_NOT_FOUND
    assert server.events("a1") == []
    assert not (running.agent.tasks_dir / "a1").exists()


async def test_timeout_stops_the_process_and_reports_timed_out(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    await start_agent()
    await server.connected()
    assert (await server.start("a1", {"command": "sleep 30", "timeout_s": 0.3})).accepted
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    assert terminal.type == pb.RUNTIME_EVENT_TYPE_TIMED_OUT
    assert terminal.exit_code == 128 + 15 and terminal.payload["signal"] == "SIGTERM"
    signalled = [e for e in server.events("a1") if e.type == pb.RUNTIME_EVENT_TYPE_SIGNALLED]
    assert [e.payload["signal"] for e in signalled] == ["SIGTERM"]
    assert signalled[0].payload["reason"] == "timeout"


async def test_large_output_is_bounded_in_events_and_complete_in_the_log(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    await start_agent(output_max_backlog=16 * 1024)
    await server.connected()
    command = "head -c 300000 /dev/zero | tr '\\0' 'x'; echo; echo tail-marker"
    assert (await server.start("a1", {"command": command})).accepted
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    assert terminal.type == pb.RUNTIME_EVENT_TYPE_SUCCEEDED
    outputs = [e for e in server.events("a1") if e.type == pb.RUNTIME_EVENT_TYPE_OUTPUT]
    assert all(len(str(e.payload["data"]).encode()) <= 4096 for e in outputs if "data" in e.payload)
    assert any("skipped_bytes" in e.payload for e in outputs)
    assert len(outputs) < 300000 // 4096
    assert server.output("a1").endswith("tail-marker\n")
    assert terminal.payload["log_size"] == 300000 + len("\ntail-marker\n")
    assert_gapless(server, "a1")
