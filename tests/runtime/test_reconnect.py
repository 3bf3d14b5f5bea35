"""The stream: hello and heartbeats, acks and re-sends after a reconnect, the unary
fallback, and self-fencing when truerun cannot be reached."""

from __future__ import annotations

import time
from pathlib import Path

from truerun.v1 import capacity_service_pb2 as cpb
from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.runtime.helpers import OWNER, TOKEN, eventually, handle_of, process_alive
from tests.support.fake_runtime_server import FakeRuntimeServer, task_id
from truerun_runtime import Backoff, Outbox, RuntimeClient, make_event

RUNNING = pb.RUNTIME_EVENT_TYPE_RUNNING
SIGNALLED = pb.RUNTIME_EVENT_TYPE_SIGNALLED


async def test_hello_and_heartbeats_identify_the_runtime(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    first = await start_agent(limit=3)
    session = await server.connected()
    hello = session.hello
    assert (hello.runtime_token, hello.owner_id) == (TOKEN, OWNER)
    instance = first.agent.instance_id
    assert hello.runtime_instance_id == instance and instance.startswith("rt-")
    assert [(r.device_id, r.kind) for r in hello.routes] == [(instance, "stream")]
    assert hello.agent_version
    beat = await server.wait_for(lambda: server.heartbeats, what="a heartbeat")
    observation = beat[0]
    assert (observation.owner_id, observation.runtime_instance_id) == (OWNER, instance)
    assert observation.limit == 3 and observation.active == 0 and observation.queued == 0
    assert list(observation.labels) == ["linux", "test"]
    assert observation.routes == hello.routes and observation.HasField("observe_time")

    await first.stop()
    await start_agent(limit=3)
    again = await server.connected(2)
    assert again.hello.runtime_instance_id == instance, "the instance id is stable"


async def test_reconnect_resends_unacknowledged_events_only(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    server.auto_ack = False
    running = await start_agent()
    outbox = running.agent.outbox
    first = await server.connected(1)
    assert (await server.start("a1", {"command": "echo one; exit 3"})).accepted
    await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    total = len(server.events("a1"))
    assert total >= 4
    first.send(pb.ConnectResponse(ack=pb.Ack(attempt_id="a1", seq=2)))
    await eventually(lambda: outbox.acked_seq("a1") == 2, what="ack 2 applied")

    server.drop()
    second = await server.connected(2)
    resent = await server.wait_for(
        lambda: [e.seq for e in second.events("a1")]
        if len(second.events("a1")) >= total - 2
        else None,
        what="re-sent events",
    )
    assert resent == list(range(3, total + 1))
    await server.wait_for(lambda: second.received[-1].HasField("heartbeat"), what="a heartbeat")
    kinds = [m.WhichOneof("kind") for m in second.received]
    assert kinds.index("event") < kinds.index("heartbeat"), "re-sends go first"

    second.send(pb.ConnectResponse(ack=pb.Ack(attempt_id="a1", seq=total)))
    await eventually(lambda: outbox.acked_seq("a1") == total, what="all acked")
    assert outbox.unacked() == []
    server.drop()
    third = await server.connected(3)
    await server.inspect("a1")  # a round trip: anything re-sent would have come before it
    assert third.events("a1") == []
    assert [e.seq for e in server.events("a1")] == list(range(1, total + 1))


class _NoCommands:
    async def on_start(self, start: pb.Start) -> pb.StartResult:
        raise AssertionError("unexpected Start")

    async def on_cancel(self, cancel: pb.Cancel) -> pb.CancelResult:
        raise AssertionError("unexpected Cancel")

    async def on_inspect(self, inspect: pb.Inspect) -> pb.InspectResult:
        raise AssertionError("unexpected Inspect")

    def observe(self) -> cpb.Observation:
        return cpb.Observation(limit=1)


async def test_report_events_is_the_unary_fallback(
    server: FakeRuntimeServer, address: str, root: Path
) -> None:
    outbox = Outbox(root / "outbox")
    routes = [cpb.Route(device_id="d1", kind="local")]
    client = RuntimeClient(address, TOKEN, OWNER, "rt-1", routes, _NoCommands(), outbox=outbox)
    for event_type in (pb.RUNTIME_EVENT_TYPE_ACCEPTED, RUNNING, pb.RUNTIME_EVENT_TYPE_SUCCEEDED):
        outbox.append(
            make_event("a1", "t1", "cb", event_type, exit_code=0 if event_type == 4 else None)
        )
    assert await client.report_events() == 3
    assert [e.seq for e in server.unary_calls[0].events] == [1, 2, 3]
    assert server.unary_calls[0].runtime_token == TOKEN
    assert outbox.unacked() == [] and outbox.acked_seq("a1") == 3
    assert await client.report_events() == 0
    assert len(server.unary_calls) == 1, "acknowledged events are not sent again"


async def test_self_fencing_stops_only_opted_in_runs_when_truerun_is_unreachable(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    running = await start_agent(limit=2)
    await server.connected(1)
    fenced = await server.start("a1", {"command": "exec sleep 30"}, self_fence_after_ms=300)
    free = await server.start("a2", {"command": f"while [ ! -e {root}/go ]; do sleep 0.02; done"})
    assert fenced.accepted and free.accepted
    await server.wait_for(lambda: server.has("a1", RUNNING) and server.has("a2", RUNNING))
    state = running.agent.tasks_dir.parent
    fenced_pid, free_pid = (int(handle_of(state, a)["pid"]) for a in ("a1", "a2"))

    server.refuse = True
    server.drop()
    await eventually(lambda: not process_alive(fenced_pid), what="the fenced run stopped")
    assert process_alive(free_pid), "a run without self-fencing keeps running"
    assert running.agent.client.unreachable_ms() >= 300

    server.refuse = False
    await server.connected(2)
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="a1 terminal")
    assert terminal.type == pb.RUNTIME_EVENT_TYPE_FAILED and terminal.error_code == "SELF_FENCED"
    assert terminal.exit_code == 128 + 15
    signalled = [e for e in server.events("a1") if e.type == SIGNALLED]
    assert [e.payload["reason"] for e in signalled] == ["self_fence"]
    assert SIGNALLED not in server.types("a2")
    (root / "go").touch()
    await server.wait_for(lambda: server.terminal("a2"), what="a2 terminal")
    assert server.terminal("a2").type == pb.RUNTIME_EVENT_TYPE_SUCCEEDED  # type: ignore[union-attr]
    assert task_id("a1") not in server.heartbeats[-1].active_task_ids


async def test_a_runs_own_self_fence_wins_over_the_agents_default(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    """Issue #5: per-run opt-in. The agent's default (10 min here) would fence nothing within
    the test; the run whose Start names 300 ms is fenced, the one naming none keeps the
    default and runs on."""
    running = await start_agent(limit=2, self_fence_after_ms=600_000)
    await server.connected(1)
    fenced = await server.start("a1", {"command": "exec sleep 30"}, self_fence_after_ms=300)
    default = await server.start("a2", {"command": "exec sleep 30"})
    assert fenced.accepted and default.accepted
    await server.wait_for(lambda: server.has("a1", RUNNING) and server.has("a2", RUNNING))
    state = running.agent.tasks_dir.parent
    fenced_pid, default_pid = (int(handle_of(state, a)["pid"]) for a in ("a1", "a2"))

    server.refuse = True
    server.drop()
    await eventually(lambda: not process_alive(fenced_pid), what="the fenced run stopped")
    assert process_alive(default_pid), "the agent's default (10 min) has not passed"
    server.refuse = False
    await server.connected(2)
    terminal = await server.wait_for(lambda: server.terminal("a1"), what="a1 terminal")
    assert terminal.type == pb.RUNTIME_EVENT_TYPE_FAILED and terminal.error_code == "SELF_FENCED"
    assert SIGNALLED not in server.types("a2")


async def test_a_healthy_stream_that_breaks_reconnects_at_the_first_delay_every_time(
    server: FakeRuntimeServer, start_agent: StartAgent
) -> None:
    """A server that dies again and again (each stream welcomed, then broken with an error)
    never pushes the runtime's reconnect delay up: only failed connects grow the backoff (it
    grew with every server restart: 0.3, 0.6, 1.2, 2.4 s here, up to 15 s by default)."""
    await start_agent(backoff=Backoff(initial_s=0.3, max_s=10.0, jitter=0.0))
    await server.connected(1)
    for count in range(2, 6):
        server.abort()
        broke = time.monotonic()
        await server.connected(count)
        assert time.monotonic() - broke < 1.0, f"reconnect {count - 1} waited too long"
