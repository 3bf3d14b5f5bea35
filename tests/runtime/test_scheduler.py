"""The local scheduler: a hard limit D shared by truerun's attempts and manual tasks."""

from __future__ import annotations

import asyncio
from pathlib import Path

from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.runtime.helpers import eventually
from tests.support.fake_runtime_server import FakeRuntimeServer, task_id
from truerun_runtime.agent import cli
from truerun_runtime.agent.local import request

RUNNING = pb.RUNTIME_EVENT_TYPE_RUNNING
SUCCEEDED = pb.RUNTIME_EVENT_TYPE_SUCCEEDED


def gated(root: Path, name: str) -> str:
    """A command that proves it runs alone (mkdir is atomic) and waits for its gate file."""
    lock, gate = root / "lock", root / f"gate-{name}"
    return (
        f"mkdir {lock} 2>/dev/null || echo {name} >> {root}/overlaps; "
        f"echo {name} >> {root}/order; "
        f"while [ ! -e {gate} ]; do sleep 0.02; done; rmdir {lock}"
    )


def running_order(server: FakeRuntimeServer) -> list[str]:
    return [
        m.event.attempt_id
        for s in server.sessions
        for m in s.received
        if m.HasField("event") and m.event.type == RUNNING
    ]


async def test_limit_one_accepts_at_once_but_runs_one_at_a_time(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    await start_agent(limit=1)
    await server.connected()
    assert (await server.start("a1", {"command": gated(root, "a1")})).accepted
    await server.wait_for(lambda: server.has("a1", RUNNING), what="a1 running")
    second = await server.start("a2", {"command": gated(root, "a2")})
    assert second.accepted and second.seq == 1  # accepted at once: waiting_runtime
    busy = await server.wait_for(
        lambda: [h for h in server.heartbeats if h.queued == 1], what="a heartbeat with a2 queued"
    )
    await server.wait_for(lambda: server.types("a2"), what="a2's first event")
    assert server.types("a2") == [pb.RUNTIME_EVENT_TYPE_ACCEPTED]
    assert busy[-1].active == 1 and list(busy[-1].active_task_ids) == [task_id("a1")]
    assert (await server.inspect("a2")).state == pb.INSPECT_STATE_ACCEPTED

    (root / "gate-a1").touch()
    await server.wait_for(lambda: server.has("a2", RUNNING), what="a2 running")
    (root / "gate-a2").touch()
    await server.wait_for(lambda: server.has("a2", SUCCEEDED), what="a2 done")

    assert server.has("a1", SUCCEEDED)
    assert not (root / "overlaps").exists(), "two commands ran at once"
    assert (root / "order").read_text().split() == ["a1", "a2"]
    assert max(h.active for h in server.heartbeats) == 1
    assert all(h.limit == 1 and h.active == len(h.active_task_ids) for h in server.heartbeats)


async def test_front_of_queue_jumps_the_local_queue_but_not_the_limit(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    await start_agent(limit=1)
    await server.connected()
    assert (await server.start("a1", {"command": gated(root, "a1")})).accepted
    await server.wait_for(lambda: server.has("a1", RUNNING), what="a1 running")
    assert (await server.start("a2", {"command": gated(root, "a2")})).accepted
    assert (await server.start("a3", {"command": gated(root, "a3")}, front_of_queue=True)).accepted
    await server.wait_for(lambda: any(h.queued == 2 for h in server.heartbeats), what="2 queued")
    assert running_order(server) == ["a1"], "run-now never starts a D+1-th process"

    for name in ("a1", "a3", "a2"):
        (root / f"gate-{name}").touch()
    await server.wait_for(lambda: server.has("a2", SUCCEEDED), what="all done")
    assert running_order(server) == ["a1", "a3", "a2"]
    assert not (root / "overlaps").exists()


async def test_manual_task_counts_in_active_and_shares_the_limit(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    running = await start_agent(limit=1)
    await server.connected()
    runner = running.agent.start_manual(["sh", "-c", gated(root, "manual")])
    manual_id = runner.record.task_id
    assert manual_id.startswith("manual-")
    beat = await server.wait_for(
        lambda: [h for h in server.heartbeats if manual_id in h.active_task_ids], what="manual"
    )
    assert beat[-1].active == 1

    assert (await server.start("a1", {"command": "echo after-manual"})).accepted
    await server.wait_for(lambda: any(h.queued == 1 for h in server.heartbeats), what="queued")
    assert not server.has("a1", RUNNING), "the manual task holds the only slot"
    (root / "gate-manual").touch()
    await server.wait_for(lambda: server.has("a1", SUCCEEDED), what="a1 done")
    assert runner.result == (SUCCEEDED, 0)
    assert server.output("a1") == "after-manual\n"
    assert not any(e.attempt_id == "" for s in server.sessions for e in s.events())


async def test_run_local_cli_goes_through_the_agent_socket(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    running = await start_agent(limit=2)
    await server.connected()
    state = str(running.agent.config.state_dir)
    argv = ["run-local", "--state-dir", state, "--", "sh", "-c", "echo local-out; exit 4"]
    code = await asyncio.to_thread(cli.main, argv)
    assert code == 4

    detached = ["run-local", "--state-dir", state, "--detach", "--", "sh", "-c", gated(root, "m")]
    assert await asyncio.to_thread(cli.main, detached) == 0

    async def status() -> dict[str, object]:
        answers = [a async for a in request(running.agent.socket_path, {"op": "status"})]
        return answers[0]

    first = await status()
    assert first["active"] == 1 and str(first["active_task_ids"][0]).startswith("manual-")  # type: ignore[index]
    (root / "gate-m").touch()
    await eventually(lambda: running.agent.occupied() == 0, what="manual task done")
    assert (await status())["active"] == 0
