"""Cancel (SIGTERM, SIGKILL after the grace, each evidenced) and Inspect (only what the
durable handle and the supervisor prove); a handle that does not match is never signalled."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.runtime.helpers import handle_of, process_alive
from tests.support.fake_runtime_server import FakeRuntimeServer
from truerun_runtime.agent.procfs import ProcStat, read_stat

SIGNALLED = pb.RUNTIME_EVENT_TYPE_SIGNALLED
CANCELLED = pb.RUNTIME_EVENT_TYPE_CANCELLED
RUNNING = pb.RUNTIME_EVENT_TYPE_RUNNING

TRAPS_TERM = "trap 'echo got-term' TERM; echo ready; while true; do sleep 0.05; done"


async def wait_ready(server: FakeRuntimeServer, attempt_id: str) -> None:
    await server.wait_for(lambda: "ready" in server.output(attempt_id), what="ready")


async def test_cancel_terms_then_kills_a_process_that_traps_term(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    running = await start_agent()
    await server.connected()
    assert (await server.start("a1", {"command": TRAPS_TERM})).accepted
    await wait_ready(server, "a1")
    pid = int(handle_of(running.agent.tasks_dir.parent, "a1")["pid"])

    result = await server.cancel("a1", grace_ms=300)
    assert result.found
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="cancelled")
    events = server.events("a1")
    tail = [e.type for e in events if e.type in (SIGNALLED, CANCELLED)]
    assert tail == [SIGNALLED, SIGNALLED, CANCELLED]
    signals = [e.payload["signal"] for e in events if e.type == SIGNALLED]
    assert signals == ["SIGTERM", "SIGKILL"]
    assert terminal.exit_code == 128 + 9
    assert "got-term" in server.output("a1"), "the command saw SIGTERM first"
    assert not process_alive(pid)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_cancel_of_a_cooperative_process_needs_one_signal(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    await start_agent()
    await server.connected()
    assert (await server.start("a1", {"command": "echo ready; exec sleep 30"})).accepted
    await wait_ready(server, "a1")
    assert (await server.cancel("a1", grace_ms=5000)).found
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="cancelled")
    assert terminal.type == CANCELLED and terminal.exit_code == 128 + 15
    assert [e.payload["signal"] for e in server.events("a1") if e.type == SIGNALLED] == ["SIGTERM"]
    again = await server.cancel("a1")
    assert again.found  # known, already stopped: nothing more is sent
    assert server.types("a1").count(SIGNALLED) == 1


async def test_cancel_of_a_queued_task_never_starts_it(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    await start_agent(limit=1)
    await server.connected()
    assert (
        await server.start("a1", {"command": f"while [ ! -e {root}/go ]; do sleep 0.02; done"})
    ).accepted
    await server.wait_for(lambda: server.has("a1", RUNNING), what="a1 running")
    assert (await server.start("a2", {"command": f"touch {root}/a2-ran"})).accepted
    assert (await server.cancel("a2")).found
    terminal = await server.wait_for(lambda: server.terminal("a2"), what="a2 cancelled")
    assert terminal.type == CANCELLED and not terminal.HasField("exit_code")
    (root / "go").touch()
    await server.wait_for(lambda: server.terminal("a1"), what="a1 done")
    assert server.types("a2") == [pb.RUNTIME_EVENT_TYPE_ACCEPTED, CANCELLED]
    assert not (root / "a2-ran").exists()


async def test_cancel_of_unknown_or_mismatched_task_is_not_found(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    await start_agent()
    await server.connected()
    assert not (await server.cancel("nope")).found
    assert (await server.start("a1", {"command": "echo ready; sleep 30"})).accepted
    await wait_ready(server, "a1")
    assert not (await server.cancel("a1", task="another-task-id")).found
    assert SIGNALLED not in server.types("a1")
    assert (await server.inspect("a1", task="another-task-id")).state == pb.INSPECT_STATE_NOT_FOUND


async def test_inspect_running_finished_and_never_received(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    await start_agent()
    await server.connected()
    assert (
        await server.start(
            "a1", {"command": f"echo ready; while [ ! -e {root}/go ]; do sleep 0.02; done; exit 5"}
        )
    ).accepted
    await wait_ready(server, "a1")
    running = await server.inspect("a1")
    assert running.state == pb.INSPECT_STATE_RUNNING
    assert running.turn_status == pb.TURN_STATUS_ACTIVE
    assert running.last_seq == len(server.events("a1"))

    (root / "go").touch()
    await server.wait_for(lambda: server.terminal("a1"), what="finished")
    finished = await server.inspect("a1")
    assert finished.state == pb.INSPECT_STATE_FINISHED
    assert finished.terminal_type == pb.RUNTIME_EVENT_TYPE_FAILED and finished.exit_code == 5
    assert finished.last_seq == len(server.events("a1"))

    never = await server.inspect("never-started")  # the state dir's id journals every Start
    assert never.state == pb.INSPECT_STATE_NEVER_RECEIVED


async def _running_with_a_handle_that_proves_nothing(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> ProcStat:
    """Task a1 running (``sleep 30``) with its handle's start time changed, so the handle no
    longer proves the live process; its supervisor lives on. The real process's stat."""
    running = await start_agent()
    await server.connected()
    assert (await server.start("a1", {"command": "echo ready; exec sleep 30"})).accepted
    await wait_ready(server, "a1")
    state_dir = running.agent.tasks_dir.parent
    handle = handle_of(state_dir, "a1")
    stat = read_stat(int(handle["pid"]))
    assert stat is not None and stat.start_ticks == handle["start_ticks"]
    handle["start_ticks"] = int(handle["start_ticks"]) + 1
    (state_dir / "tasks" / "a1" / "handle.json").write_text(json.dumps(handle))
    return stat


async def test_a_handle_that_does_not_match_proves_nothing_and_is_never_signalled(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    # The pid now "belongs" to a process that started at another time (pid reuse).
    stat = await _running_with_a_handle_that_proves_nothing(server, start_agent)
    pid = stat.pgid  # the command leads its own process group

    # Not provably gone either: its supervisor lives and wrote no status (a command it has
    # just reaped looks like this until the status lands), so the answer claims nothing.
    assert (await server.inspect("a1")).state == pb.INSPECT_STATE_UNSPECIFIED
    assert not (await server.cancel("a1", grace_ms=100)).found
    assert SIGNALLED not in server.types("a1")
    assert process_alive(pid), "an unproven process was signalled"
    assert server.terminal("a1") is None

    # The test knows the process is the real one; once it ends, its supervisor's status is
    # still reported as it is (not as a cancel: no signal came from the agent).
    os.killpg(stat.pgid, signal.SIGKILL)
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    assert terminal.type == pb.RUNTIME_EVENT_TYPE_FAILED and terminal.exit_code == 128 + 9


async def test_a_command_reaped_before_its_status_is_written_is_not_reported_gone(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    """The supervisor reaps the command, then writes its status: in between, the handle's
    process is gone and no status exists. Inspect must wait for the status there, never answer
    "not found" (which makes the attempt lost). The window is held open by a handle that no
    longer proves the process (as after the reap) while the supervisor lives."""
    stat = await _running_with_a_handle_that_proves_nothing(server, start_agent)

    asking = asyncio.ensure_future(server.inspect("a1"))
    await asyncio.sleep(0.3)  # the inspect is waiting; now the command ends for real
    assert not asking.done()
    os.killpg(stat.pgid, signal.SIGKILL)
    answer = await asking
    assert answer.state == pb.INSPECT_STATE_FINISHED
    assert answer.exit_code == 128 + 9
