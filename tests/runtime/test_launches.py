"""A supervisor that dies before it starts the command is the runtime's fault, not the
command's: the agent abandons that launch (so it can never start the command) and launches
the task again, up to MAX_LAUNCHES, within the same attempt. A CI soak once saw an agent
SIGKILLed while spawning a supervisor fail its run "after 0 starts" instead."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.runtime.helpers import eventually
from tests.support.fake_runtime_server import FakeRuntimeServer
from truerun_runtime.agent.agent import Agent
from truerun_runtime.agent.launches import MAX_LAUNCHES
from truerun_runtime.agent.procfs import read_json
from truerun_runtime.agent.tasks import TaskPaths, TaskRecord

ACCEPTED = pb.RUNTIME_EVENT_TYPE_ACCEPTED
RUNNING = pb.RUNTIME_EVENT_TYPE_RUNNING
Spawn = Callable[[Agent, TaskRecord, TaskPaths], int]
REAL_SPAWN: Spawn = Agent._spawn_supervisor


def spawning(monkeypatch: pytest.MonkeyPatch, broken: int, argv: list[str]) -> list[int]:
    """The first ``broken`` supervisors are ``argv`` (which never writes a handle), the rest
    real; returns the pids of every supervisor started, in order."""
    pids: list[int] = []

    def spawn(agent: Agent, record: TaskRecord, paths: TaskPaths) -> int:
        if len(pids) < broken:
            pid = os.posix_spawn(argv[0], argv, dict(os.environ), setsid=True)
        else:
            pid = REAL_SPAWN(agent, record, paths)
        pids.append(pid)
        return pid

    monkeypatch.setattr(Agent, "_spawn_supervisor", spawn)
    return pids


def marker_command(root: Path) -> str:
    return f"echo started >> {root}/marker; echo done"


async def test_a_supervisor_that_died_before_the_exec_is_launched_again(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = spawning(monkeypatch, broken=1, argv=["/bin/true"])
    agent = await start_agent()
    await server.connected(1)
    assert (await server.start("a1", {"command": marker_command(root)})).accepted
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="a1 ended")

    assert terminal.type == pb.RUNTIME_EVENT_TYPE_SUCCEEDED and terminal.exit_code == 0
    assert (root / "marker").read_text() == "started\n", "the command ran once"
    assert len(pids) == 2
    types = server.types("a1")
    assert types.count(ACCEPTED) == 1 and types.count(RUNNING) == 1
    assert pb.RUNTIME_EVENT_TYPE_FAILED not in types
    task = agent.agent.tasks_dir / "a1"
    assert read_json(task / "launch.json")["launch"] == 2  # type: ignore[index]
    assert read_json(task / "handle.abandoned-1.json")["abandoned"] is True  # type: ignore[index]


async def test_a_task_whose_supervisor_never_starts_it_fails_after_the_last_launch(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = spawning(monkeypatch, broken=MAX_LAUNCHES + 1, argv=["/bin/true"])
    await start_agent()
    await server.connected(1)
    assert (await server.start("a1", {"command": marker_command(root)})).accepted
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="a1 ended")

    assert terminal.type == pb.RUNTIME_EVENT_TYPE_FAILED
    assert terminal.error_code == "SUPERVISOR_FAILED"
    assert f"launch {MAX_LAUNCHES} of {MAX_LAUNCHES}" in terminal.error_summary
    assert not terminal.HasField("exit_code")
    assert len(pids) == MAX_LAUNCHES
    assert not (root / "marker").exists(), "the command never ran"
    assert server.types("a1").count(RUNNING) == 0


async def test_an_agent_killed_while_spawning_the_supervisor_launches_again_on_restart(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak's case: the agent died while it started the supervisor, which died with it
    before writing anything. The restarted agent waits ``launch_timeout_s`` for a trace of
    that supervisor, then abandons the launch and launches the task again."""
    pids = spawning(monkeypatch, broken=1, argv=["/bin/sleep", "60"])  # a supervisor starting
    first = await start_agent()
    await server.connected(1)
    assert (await server.start("a1", {"command": marker_command(root)})).accepted
    task = first.agent.tasks_dir / "a1"
    await eventually(lambda: pids, what="the first supervisor spawned")
    await first.stop()
    os.kill(pids[0], signal.SIGKILL)  # ... and it dies with the agent, without a trace
    os.waitpid(pids[0], 0)
    assert not (task / "handle.json").exists() and not (task / "supervisor.json").exists()

    await start_agent(launch_timeout_s=0.5)
    await server.connected(2)
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="a1 ended")
    assert terminal.type == pb.RUNTIME_EVENT_TYPE_SUCCEEDED
    assert (root / "marker").read_text() == "started\n", "the command ran once"
    assert len(pids) == 2
    assert server.types("a1").count(ACCEPTED) == 1
    assert read_json(task / "handle.abandoned-1.json")["abandoned"] is True  # type: ignore[index]
