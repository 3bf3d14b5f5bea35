"""Inspect of an attempt the agent has no task of: NEVER_RECEIVED only where its Start journal
proves that no Start of it ever reached the instance id (a generated id, journalled from its
birth), NOT_FOUND otherwise (a configured id, a received Start that was refused, a task pruned
after the retention period), and the same after the agent restarts on its state dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.runtime.helpers import AgentProcess
from tests.support.fake_runtime_server import FakeRuntimeServer

NEVER_RECEIVED = pb.INSPECT_STATE_NEVER_RECEIVED
NOT_FOUND = pb.INSPECT_STATE_NOT_FOUND


async def states(server: FakeRuntimeServer, *attempts: str) -> list[int]:
    return [(await server.inspect(a)).state for a in attempts]


async def test_a_start_that_never_arrived_is_never_received_and_a_refused_one_not_found(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    await start_agent()
    await server.connected()
    refused = await server.start("refused", {"cmd": "true"})  # an invalid spec
    assert not refused.accepted
    assert await states(server, "never-sent", "refused") == [NEVER_RECEIVED, NOT_FOUND]


async def test_with_a_configured_instance_id_it_is_never_proven(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    running = await start_agent(instance_id="dev-configured")
    session = await server.connected()
    assert session.hello.runtime_instance_id == "dev-configured"
    assert await states(server, "never-sent") == [NOT_FOUND]
    assert not (running.agent.tasks_dir.parent / "starts.jsonl").exists()


async def test_a_pruned_task_stays_received(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    first = await start_agent()
    await server.connected(1)
    assert (await server.start("a1", {"command": "true"})).accepted
    await server.wait_for(lambda: server.terminal("a1"), what="a1 finished")
    outbox = first.agent.outbox
    await server.wait_for(
        lambda: outbox.last_seq("a1") and outbox.acked_seq("a1") == outbox.last_seq("a1"),
        what="every event of a1 acknowledged",
    )
    await first.stop()

    second = await start_agent(retention_s=0.0)  # prunes the finished task as it starts
    await server.connected(2)
    assert not (second.agent.tasks_dir / "a1").exists(), "the task was pruned"
    assert "a1" not in second.agent.outbox.attempts()
    assert await states(server, "a1", "never-sent") == [NOT_FOUND, NEVER_RECEIVED]


@pytest.fixture
def process(address: str, root: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(address, root / "state")
    yield agent
    agent.stop()


async def test_the_answers_hold_after_the_agent_process_is_killed_and_restarted(
    server: FakeRuntimeServer, process: AgentProcess
) -> None:
    process.start()
    await server.connected(1)
    assert not (await server.start("refused", {"cmd": "true"})).accepted
    assert (await server.start("a1", {"command": "exec sleep 30"})).accepted
    assert await states(server, "never-sent", "refused") == [NEVER_RECEIVED, NOT_FOUND]

    process.kill()
    await server.wait_for(lambda: server.sessions[0].closed, what="stream 1 closed")
    process.start()
    second = await server.connected(2)
    assert second.hello.runtime_instance_id == server.sessions[0].hello.runtime_instance_id
    assert await states(server, "never-sent", "refused") == [NEVER_RECEIVED, NOT_FOUND]
    assert (await server.inspect("a1")).state == pb.INSPECT_STATE_RUNNING
    assert (await server.cancel("a1", grace_ms=100)).found
    await server.wait_for(lambda: server.terminal("a1"), what="a1 cancelled")


async def test_a_configured_id_process_answers_not_found_after_a_restart_too(
    server: FakeRuntimeServer, address: str, root: Path
) -> None:
    agent = AgentProcess(address, root / "state", instance_id="dev-configured")
    try:
        agent.start()
        await server.connected(1)
        assert await states(server, "never-sent") == [NOT_FOUND]
        agent.kill()
        await server.wait_for(lambda: server.sessions[0].closed, what="stream 1 closed")
        agent.start()
        await server.connected(2)
        assert await states(server, "never-sent") == [NOT_FOUND]
    finally:
        agent.stop()
