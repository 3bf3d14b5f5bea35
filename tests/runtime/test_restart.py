"""The agent can die (SIGKILL) at any time: commands run on under their supervisors, and a
restarted agent re-attaches and reports what really happened, with the next seqs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from truerun.v1 import capacity_service_pb2 as cpb
from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.runtime.helpers import AgentProcess, eventually, handle_of, process_alive
from tests.support.fake_runtime_server import FakeRuntimeServer, task_id
from tests.support.processes import kill_tasks
from truerun_runtime.agent.procfs import read_json

RUNNING = pb.RUNTIME_EVENT_TYPE_RUNNING
ACCEPTED = pb.RUNTIME_EVENT_TYPE_ACCEPTED


@pytest.fixture
def agent(address: str, root: Path) -> Iterator[AgentProcess]:
    process = AgentProcess(address, root / "state", limit=2)
    process.start()
    yield process
    process.stop()


def command(root: Path) -> str:
    return (
        f"echo started >> {root}/marker; echo out1; "
        f"while [ ! -e {root}/go ]; do sleep 0.02; done; echo out2; exit 7"
    )


def assert_reported_once(server: FakeRuntimeServer, root: Path) -> None:
    terminal = server.terminal("a1")
    assert terminal is not None and terminal.type == pb.RUNTIME_EVENT_TYPE_FAILED
    assert terminal.exit_code == 7
    assert server.output("a1") == "out1\nout2\n"
    assert (root / "marker").read_text() == "started\n", "the command started once"
    types = server.types("a1")
    assert types.count(ACCEPTED) == 1 and types.count(RUNNING) == 1
    events = server.events("a1")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1] is terminal
    assert not server.gaps


async def test_sigkilled_agent_reattaches_to_a_running_command(
    server: FakeRuntimeServer, agent: AgentProcess, root: Path
) -> None:
    state = agent.state_dir
    await server.connected(1)
    assert (await server.start("a1", {"command": command(root)})).accepted
    await server.wait_for(lambda: "out1" in server.output("a1"), what="out1")
    handle = handle_of(state, "a1")
    supervisor = read_json(state / "tasks" / "a1" / "supervisor.json")
    assert supervisor is not None

    agent.kill()
    await server.wait_for(lambda: server.sessions[0].closed, what="stream 1 closed")
    assert process_alive(int(handle["pid"])), "the command died with the agent"
    assert process_alive(int(supervisor["pid"])), "the supervisor died with the agent"

    agent.start()
    session = await server.connected(2)
    await server.wait_for(
        lambda: any(
            m.heartbeat.observation.active_task_ids == [task_id("a1")]
            for m in session.received
            if m.HasField("heartbeat")
        ),
        what="the re-attached task in a heartbeat",
    )
    assert (await server.inspect("a1")).state == pb.INSPECT_STATE_RUNNING
    (root / "go").touch()
    await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    assert_reported_once(server, root)
    assert handle_of(state, "a1")["pid"] == handle["pid"]


async def test_command_that_finished_while_the_agent_was_down_is_reported(
    server: FakeRuntimeServer, agent: AgentProcess, root: Path
) -> None:
    state = agent.state_dir
    await server.connected(1)
    assert (await server.start("a1", {"command": command(root)})).accepted
    await server.wait_for(lambda: "out1" in server.output("a1"), what="out1")

    agent.kill()
    (root / "go").touch()
    status = await eventually(
        lambda: read_json(state / "tasks" / "a1" / "status.json"), what="status.json"
    )
    assert status["exit_code"] == 7
    assert server.terminal("a1") is None

    agent.start()
    await server.connected(2)
    await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    assert_reported_once(server, root)
    finished = await server.inspect("a1")
    assert finished.state == pb.INSPECT_STATE_FINISHED and finished.exit_code == 7


async def test_a_restarted_agent_keeps_its_local_queue(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    first = await start_agent(limit=1)
    await server.connected(1)
    gate = f"while [ ! -e {root}/go ]; do sleep 0.02; done"
    assert (await server.start("a1", {"command": gate})).accepted
    await server.wait_for(lambda: server.has("a1", RUNNING), what="a1 running")
    assert (await server.start("a2", {"command": "echo second"})).accepted
    assert (await server.start("a3", {"command": "echo now"}, front_of_queue=True)).accepted
    await first.stop()  # a graceful stop leaves commands and the queue to the next agent

    second = await start_agent(limit=1)
    await server.connected(2)
    assert [r.record.attempt_id for r in second.agent.queue] == ["a3", "a2"]
    (root / "go").touch()
    await server.wait_for(lambda: server.terminal("a2"), what="a2 done")
    order = [
        m.event.attempt_id
        for s in server.sessions
        for m in s.received
        if m.HasField("event") and m.event.type == RUNNING
    ]
    assert order.index("a3") < order.index("a2")
    for attempt in ("a1", "a2", "a3"):
        assert server.types(attempt).count(ACCEPTED) == 1
        assert server.types(attempt).count(RUNNING) == 1
    assert server.output("a2") == "second\n"


async def test_finished_acknowledged_tasks_are_pruned_after_the_retention(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    first = await start_agent(retention_s=0)
    await server.connected(1)
    assert (await server.start("a1", {"command": "true"})).accepted
    await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    outbox = first.agent.outbox
    await eventually(lambda: outbox.unacked() == [], what="all acknowledged")
    await first.stop()

    second = await start_agent(retention_s=0)
    await server.connected(2)
    assert "a1" not in second.agent.runners
    assert not (second.agent.tasks_dir / "a1").exists()
    assert second.agent.outbox.attempts() == []
    assert (await server.inspect("a1")).state == pb.INSPECT_STATE_NOT_FOUND


async def test_a_whole_worker_death_is_reported_lost_never_not_found(
    server: FakeRuntimeServer, agent: AgentProcess, root: Path
) -> None:
    """Issue #18: the agent, the supervisor and the command die together (a container
    death); the agent restarts on its state dir. It had the task and nothing accounts for
    it: Inspect answers LOST (not NOT_FOUND, which means "never had it"), its heartbeats no
    longer list it, its slot is free, and it sends no event it has no evidence for."""
    state = agent.state_dir
    await server.connected(1)
    assert (await server.start("a1", {"command": command(root)})).accepted
    await server.wait_for(lambda: "out1" in server.output("a1"), what="out1")
    handle = handle_of(state, "a1")
    events_before = len(server.events("a1"))

    agent.kill()
    kill_tasks(state)
    await eventually(lambda: not process_alive(int(handle["pid"])), what="the command gone")

    agent.start()
    session = await server.connected(2)
    answer = await server.inspect("a1")
    assert answer.state == pb.INSPECT_STATE_LOST, answer
    assert answer.last_seq == events_before
    heartbeat = await server.wait_for(
        lambda: next((m.heartbeat for m in session.received if m.HasField("heartbeat")), None),
        what="a heartbeat of the restarted agent",
    )
    assert list(heartbeat.observation.active_task_ids) == []
    assert list(heartbeat.observation.queued_task_ids) == []
    assert heartbeat.observation.active == 0
    assert server.terminal("a1") is None
    assert len(server.events("a1")) == events_before, "no event without evidence"
    # The freed slot takes the next task.
    assert (await server.start("a2", {"command": "echo again"})).accepted
    done = await server.wait_for(lambda: server.terminal("a2"), what="a2 ran")
    assert done.type == pb.RUNTIME_EVENT_TYPE_SUCCEEDED


async def test_heartbeats_list_the_local_queue_by_task_id(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    """A heartbeat vouches only for what it lists: the queued tasks are named, not only
    counted, so truerun can tell a waiting task from a lost one."""
    await start_agent(limit=1)
    session = await server.connected(1)
    assert (await server.start("a1", {"command": command(root)})).accepted
    assert (await server.start("a2", {"command": "true"})).accepted

    def listing() -> cpb.Observation | None:
        for message in reversed(session.received):
            if message.HasField("heartbeat"):
                o = message.heartbeat.observation
                if list(o.queued_task_ids) == [task_id("a2")]:
                    return o
        return None

    observation = await server.wait_for(listing, what="a heartbeat naming the queued task")
    assert list(observation.active_task_ids) == [task_id("a1")]
    assert observation.queued == 1
    (root / "go").touch()
    await server.wait_for(lambda: server.terminal("a2"), what="a2 done")
