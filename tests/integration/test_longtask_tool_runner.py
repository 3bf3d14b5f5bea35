"""The tool runner's other paths (``truerun_runtime/longtask/tools.py``; docs/runtime-protocol.md
"Declared tool calls"), in process against real gRPC on SQLite and PostgreSQL: ordinary runs
created by RunService and started by a scripted runtime, the runner given their credential
(the reference agent's end to end is ``tests/e2e/test_agent_activation.py``).

- a forced request: the task exists before any call, every declared call is its step, the
  step driver runs each once and the task completes (no preflight);
- a suppressed request: a send runs with no preflight and no promotion;
- a plan that waits (a ``continue`` stage): proposed after the calls, the run is promoted
  (path ``plan``) with the executed call absorbed, and the step driver's continuation ends
  the attempt: the task waits for its next window.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import run_service_pb2 as rs

from tests.support.longtask_api import OWNER, PROJECT, get
from tests.support.longtask_stack import LongTaskStack, longtask_stack
from tests.support.scripted_runtime import ScriptedRuntime
from truerun_runtime.longtask import LongTaskAttempt
from truerun_runtime.longtask.driver import OK
from truerun_runtime.longtask.tools import ToolRunner
from truerun_runtime.longtask.toolspec import parse_tools


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


async def _run_tools(
    stack: LongTaskStack, name: str, section: dict[str, Any], cwd: Path
) -> tuple[int, str]:
    """An ordinary run started by a runtime of its own, its declared tools run by the runner
    with the run attempt's credential: (the runner's exit status, the run id)."""
    created = await stack.runs.CreateRun(
        rs.CreateRunRequest(project_id=PROJECT, owner_id=OWNER, task_id=name)
    )
    runtime = ScriptedRuntime(stack.runtime, owner=OWNER, instance=f"inst-{name}")
    await runtime.connect()
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    await runtime.answer_start(start, accepted=True)
    attempt = LongTaskAttempt(
        stack.address, start.run_id, start.attempt_id, start.callback_token, renew_every_s=60
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    code = await ToolRunner(parse_tools(section), attempt, cwd=cwd, env=env).run()
    return code, created.run.id


async def _activation(stack: LongTaskStack, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    listed = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))
    return [(e.type, dict(e.payload)) for e in listed.events if e.type.startswith("activation.")]


async def test_forced_suppressed_and_planned_requests_take_their_paths(
    stack: LongTaskStack, tmp_path: Path
) -> None:
    ran = tmp_path / "ran.log"  # every command's own record of running

    def echo(word: str) -> str:
        return f"echo {word} >> {ran}"

    # forced: a long task before any call; the driver runs both calls once; it completes
    code, forced = await _run_tools(
        stack,
        "forced",
        {
            "text": "Rebuild the index",
            "force": True,
            "calls": [
                {"id": "scan", "tier": "pure", "run": echo("scan")},
                {"id": "index", "tier": "idempotent", "run": echo("index")},
            ],
        },
        tmp_path,
    )
    assert code == OK
    events = await _activation(stack, forced)
    assert [(t, p.get("path")) for t, p in events] == [("activation.promoted", "deterministic")]
    task = await get(stack, str(events[0][1]["long_task_id"]))
    assert task.state == lt.LONG_TASK_STATE_COMPLETED, task.state_reason
    assert [(s.step_id, s.state) for s in task.steps] == [
        ("scan", lt.STEP_STATE_COMPLETED),
        ("index", lt.STEP_STATE_COMPLETED),
    ]
    assert task.steps[1].idempotency_key == f"{forced}:index"  # the run's key by default
    assert ran.read_text() == "scan\nindex\n"

    # suppressed: a send without a preflight, the run stays ordinary
    ran.unlink()
    code, quiet = await _run_tools(
        stack,
        "quiet",
        {
            "text": "Send it, then tell me",
            "suppress": True,
            "calls": [{"id": "send", "tier": "non_idempotent", "run": echo("send")}],
        },
        tmp_path,
    )
    assert code == OK and await _activation(stack, quiet) == []
    assert ran.read_text() == "send\n"

    # a plan that waits: promoted after the calls, the continuation ends the attempt
    ran.unlink()
    code, planned = await _run_tools(
        stack,
        "planned",
        {
            "text": "Collect the numbers",
            "calls": [{"id": "collect", "tier": "pure", "run": echo("collect")}],
            "plan": [
                {"id": "overnight", "continue": {"every": "1d", "catchup": "1h"}},
                {"id": "publish", "tier": "idempotent", "run": echo("publish")},
            ],
        },
        tmp_path,
    )
    assert code == OK
    events = await _activation(stack, planned)
    assert [(t, p.get("path")) for t, p in events] == [("activation.promoted", "plan")]
    task = await get(stack, str(events[0][1]["long_task_id"]))
    assert task.state == lt.LONG_TASK_STATE_QUEUED
    assert task.continuation.waiting and "waiting for its next window" in task.continuation.label
    assert [(s.step_id, s.state, s.basis) for s in task.steps] == [
        ("collect", lt.STEP_STATE_COMPLETED, "receipt"),  # absorbed on its exit-0 receipt
        ("overnight", lt.STEP_STATE_PENDING, ""),
        ("publish", lt.STEP_STATE_PENDING, ""),
    ]
    (attempt,) = task.attempts
    assert attempt.outcome == "continues_later" and attempt.run_id == planned
    assert ran.read_text() == "collect\n"
