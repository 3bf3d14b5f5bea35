"""The reference agent runs a long task's attempt: a real ``truerun agent`` process against a
live coordinator on loopback (SQLite), given a Start whose spec has ``long_task`` and no
command, runs the step driver, which works through a pure step writing a file and a
non-idempotent shell command with a JSON receipt, and verifies a ``file_exists`` criterion:
the task ends ``completed`` and the attempt's run ``succeeded``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from truerun.v1 import common_pb2, run_service_pb2_grpc
from truerun.v1 import run_service_pb2 as rs

from longtasks.domain.model import StepDraft
from longtasks.domain.states import SideEffect, StepState, TaskState
from longtasks.service.inputs import NewCriterion, NewTask
from tests.support.auth import aio_channel
from tests.support.longtask_runtime import RuntimeSide, runtime_side, until
from tests.support.longtasks import ANA, SCHEDULER
from tests.support.processes import STREAM_OPEN, AgentProcess, Processes
from tests.support.runtime_stack import RUNTIME_TOKEN

OWNER = "ana"


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[RuntimeSide]:
    async with runtime_side(f"sqlite:///{tmp_path / 'truerun.db'}") as live:
        yield live


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(logs)
    try:
        yield processes
    finally:
        processes.close()


async def _connected(agent: AgentProcess) -> None:
    async def up() -> bool:
        assert agent.alive(), agent.log()
        return STREAM_OPEN.search(agent.log()) is not None

    await until("the agent's stream", up)


async def test_the_agent_runs_a_long_task_to_completed(
    stack: RuntimeSide, procs: Processes, tmp_path: Path
) -> None:
    report, sent = tmp_path / "report.md", tmp_path / "sent.log"
    receipt = {"external_id": "msg-1", "target": "mailto:team", "summary": "sent", "at_ms": 1}
    send = f"echo \"$TRUERUN_IDEMPOTENCY_KEY\" >> {sent} && echo '{json.dumps(receipt)}'"
    new = NewTask(
        project_id="proj",
        owner_id=OWNER,
        goal="send the weekly report",
        task_id="lt-agent",
        steps=(
            StepDraft(
                "write",
                "write the report",
                SideEffect.PURE,
                action_spec=json.dumps({"run": f"echo weekly > {report}", "writes": str(report)}),
            ),
            StepDraft(
                "send",
                "send it",
                SideEffect.NON_IDEMPOTENT,
                idempotency_key="weekly-1",
                action_spec=json.dumps({"run": send, "receipt": "json"}),
            ),
        ),
        criteria=(
            NewCriterion(
                "c1", "the report exists", "file_exists", json.dumps({"path": str(report)})
            ),
        ),
    )
    agent = procs.agent(
        stack.address,
        RUNTIME_TOKEN,
        OWNER,
        tmp_path / "agent",
        wait=False,
        extra_args=("--instance-id", "lt-agent-1"),
    )
    await _connected(agent)
    created = await stack.door.create(new, ANA)
    queued = await stack.door.enqueue(created.task.id, created.task.state_version, ANA)
    started = await stack.door.start_attempt(created.task.id, SCHEDULER, queued.task.state_version)
    run_id = started.run_id
    assert run_id is not None

    async def finished() -> bool:
        task = await stack.reads.task("lt-agent")
        return task.state not in (TaskState.QUEUED, TaskState.RUNNING, TaskState.VERIFYING)

    await until("the task to finish", finished, timeout=60)
    view = await stack.reads.view("lt-agent")
    assert view.task.state is TaskState.COMPLETED, (view.task.state_reason, agent.log())
    assert [s.state for s in view.steps] == [StepState.COMPLETED, StepState.COMPLETED]
    assert report.read_text() == "weekly\n" and sent.read_text() == "weekly-1\n"
    (effect,) = view.effects_of("send")
    assert effect.receipt is not None and effect.receipt.external_id == "msg-1"
    assert [e.kind for e in view.evidence_of_criterion("c1")] == ["file"]
    async with aio_channel(stack.address) as channel:
        runs = run_service_pb2_grpc.RunServiceStub(channel)

        async def succeeded() -> bool:
            run = await runs.GetRun(rs.GetRunRequest(id=run_id))
            return bool(run.display_state == common_pb2.DISPLAY_STATE_SUCCEEDED)

        await until("the attempt's run to succeed", succeeded)
