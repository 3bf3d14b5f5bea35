"""Inspect of an attempt the agent has no task of: NEVER_RECEIVED only where its Start journal
proves that no Start of it ever reached the instance id (a generated id, journalled from its
birth), NOT_FOUND otherwise (a configured id, a received Start that was refused, a task pruned
after the retention period), and the same after the agent restarts on its state dir."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from truerun.v1 import runtime_service_pb2 as pb
from truerun.v1.runtime_service_pb2_grpc import RuntimeServiceStub

from tests.runtime.conftest import StartAgent
from tests.runtime.helpers import AgentProcess
from tests.support.fake_runtime_server import FakeRuntimeServer
from tests.support.scripted_runtime import ScriptedRuntime
from truerun_runtime import Outbox, make_event

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


async def test_an_accepted_attempt_the_journal_missed_voids_it(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    """An outbox journal without a Start record (an older agent ran on this state dir):
    the journal missed Starts, so it proves nothing any more."""
    first = await start_agent()
    await server.connected(1)
    assert await states(server, "never-sent") == [NEVER_RECEIVED]
    await first.stop()
    old = Outbox(root / "state" / "outbox", fsync=False)
    old.append(make_event("old", "rt-task-old", "cb-old", pb.RUNTIME_EVENT_TYPE_ACCEPTED))

    await start_agent()
    await server.connected(2)
    assert await states(server, "never-sent") == [NOT_FOUND]


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


# -- the test double answers as the agent does -----------------------------------------------


async def refused_then_inspected(server: FakeRuntimeServer) -> list[int]:
    """A Start refused as invalid, then Inspect of an attempt never sent and of the refused one."""
    assert not (await server.start("refused", {"cmd": "true"})).accepted
    return await states(server, "never-sent", "refused")


async def play(double: ScriptedRuntime) -> None:
    """The double's side of ``refused_then_inspected``, holding no task."""
    start = (await double.expect("start")).start
    await double.answer_start(start, False, "the spec needs a command")
    for _ in range(2):
        await double.answer_inspect_without_task((await double.expect("inspect")).inspect)


@pytest.mark.parametrize(
    ("instance_id", "expected"),
    [("", [NEVER_RECEIVED, NOT_FOUND]), ("dev-configured", [NOT_FOUND, NOT_FOUND])],
    ids=["generated id = journal", "configured id = no journal"],
)
async def test_the_scripted_runtime_answers_inspect_as_the_agent_does(
    server: FakeRuntimeServer,
    start_agent: StartAgent,
    address: str,
    instance_id: str,
    expected: list[int],
) -> None:
    agent = await start_agent(instance_id=instance_id)
    await server.connected(1)
    by_agent = await refused_then_inspected(server)
    await agent.stop()
    await server.wait_for(lambda: server.sessions[0].closed, what="the agent's stream closed")

    async with grpc.aio.insecure_channel(address) as channel:
        double = ScriptedRuntime(RuntimeServiceStub(channel), journal=not instance_id)
        await double.connect()
        player = asyncio.create_task(play(double))
        by_double = await refused_then_inspected(server)
        await player
        await double.close()
    assert by_agent == by_double == expected


async def test_the_scripted_runtime_never_claims_never_received_without_its_journal(
    server: FakeRuntimeServer, address: str
) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        for journal in (False, True):
            double = ScriptedRuntime(RuntimeServiceStub(channel), journal=journal)
            await double.connect()
            await server.connected(1 if not journal else 2)
            asking = asyncio.create_task(server.start("a1", {"command": "true"}))
            start = (await double.expect("start")).start
            await double.answer_start(start, True)
            await asking
            for attempt in ["a1"] + ([] if journal else ["a2"]):
                with pytest.raises(AssertionError, match="NEVER_RECEIVED"):
                    await double.send_inspect_result(
                        pb.InspectResult(attempt_id=attempt, state=NEVER_RECEIVED)
                    )
            await double.close()
