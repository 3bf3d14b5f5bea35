"""The runtime side of long tasks against a real coordinator on loopback (both long-task
services and RuntimeService served as production serves them), on SQLite and PostgreSQL:

- the SDK drives a whole attempt: begin, intent, receipt, complete, verification with a
  runtime checker's verdict -> completed, every row as the calls said;
- the SDK's step context marks a step uncertain when the block fails after its intent, and
  blocks it when it fails before; errors carry the server's reason;
- the step driver (``python -m truerun_runtime.longtask``) as a real process, given the
  Start's credential, runs a pure file-writing step and a non-idempotent command step with a
  JSON receipt to ``completed`` with a ``file_exists`` criterion.

The attempt's run is dispatched to a scripted runtime (the test reads the Start, with its
callback token, off a real Connect stream); the scheduler's start is the door's
``start_attempt``, called directly."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf import json_format
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1 import runtime_service_pb2 as rpb

from longtasks.domain.model import StepDraft
from longtasks.domain.states import SideEffect, StepState, TaskState
from longtasks.service.inputs import NewCriterion, NewTask
from tests.support.longtask_runtime import RuntimeSide, attempt_env, runtime_side
from tests.support.longtasks import ANA, SCHEDULER
from tests.support.scripted_runtime import ScriptedRuntime
from truerun_runtime.longtask import (
    LongTaskAttempt,
    TransitionRefused,
    Unauthenticated,
    VersionConflict,
    evidence,
    run_checker,
)
from truerun_runtime.longtask.verify import verdict

OWNER = "ana"


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[RuntimeSide]:
    async with runtime_side(migrated_database_url) as live:
        yield live


def _task(task_id: str, report: Path, *, send: str = "true") -> NewTask:
    """A pure step writing ``report`` and a non-idempotent step "sending" it (a shell
    command printing a JSON receipt); one criterion: the report file exists."""
    write = {"run": f"echo weekly > {report}", "writes": str(report)}
    receipt = {"external_id": "msg-42", "target": "mailto:team", "summary": "sent", "at_ms": 1}
    post = {"run": f"{send} && echo '{json.dumps(receipt)}'", "receipt": "json"}
    return NewTask(
        project_id="proj",
        owner_id=OWNER,
        goal="send the weekly report",
        task_id=task_id,
        steps=(
            StepDraft("write", "write the report", SideEffect.PURE, action_spec=json.dumps(write)),
            StepDraft(
                "send",
                "send it to the team",
                SideEffect.NON_IDEMPOTENT,
                idempotency_key="weekly-1",
                action_spec=json.dumps(post),
            ),
        ),
        criteria=(
            NewCriterion(
                "c1", "the report exists", "file_exists", json.dumps({"path": str(report)})
            ),
        ),
    )


async def _started(stack: RuntimeSide, new: NewTask) -> tuple[ScriptedRuntime, rpb.Start]:
    """The task created, queued and started (the scheduler's move), its run dispatched to a
    scripted runtime that accepts it: the Start with the attempt's callback token."""
    created = await stack.door.create(new, ANA)
    queued = await stack.door.enqueue(created.task.id, created.task.state_version, ANA)
    await stack.door.start_attempt(created.task.id, SCHEDULER, queued.task.state_version)
    runtime = ScriptedRuntime(stack.runtime, owner=OWNER)
    await runtime.connect()
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    await runtime.answer_start(start, accepted=True)
    await runtime.event(start, 1, rpb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await runtime.event(start, 2, rpb.RUNTIME_EVENT_TYPE_RUNNING)
    await runtime.acked(start.attempt_id, 2)
    return runtime, start


async def _lease_renewed(stack: RuntimeSide, task_id: str) -> None:
    """The SDK renews the lease in the background, between step actions (no state change):
    its expiry moves on while the attempt does nothing (bounded wait on the stored row)."""
    task = await stack.reads.task(task_id)
    assert task.lease is not None
    first, version = task.lease.expires_at_ms, task.state_version
    deadline = time.monotonic() + 10
    while True:
        task = await stack.reads.task(task_id)
        assert task.lease is not None
        if task.lease.expires_at_ms > first:
            assert task.state_version == version
            return
        assert time.monotonic() < deadline, "the lease was never renewed"
        await asyncio.sleep(0.05)


def _attempt(stack: RuntimeSide, start: rpb.Start, token: str | None = None) -> LongTaskAttempt:
    return LongTaskAttempt(
        stack.address,
        start.run_id,
        start.attempt_id,
        start.callback_token if token is None else token,
        renew_every_s=0.2,
    )


async def test_the_sdk_drives_an_attempt_to_completed(stack: RuntimeSide, tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    runtime, start = await _started(stack, _task("lt-sdk", report))
    spec = json_format.MessageToDict(start.spec)
    assert spec["long_task"]["id"] == "lt-sdk" and "command" not in spec
    try:
        async with _attempt(stack, start) as attempt:
            briefing = await attempt.briefing()
            assert briefing.long_task_id == "lt-sdk" and briefing.current_step_id == "write"
            assert briefing.state == pb.LONG_TASK_STATE_RUNNING
            async with attempt.step("write") as step:
                assert step.state == pb.STEP_STATE_RUNNING
                report.write_text("weekly\n")
                await step.complete([evidence("file", str(report), "the report")])
            briefing = await attempt.briefing()
            assert briefing.current_step_id == "send"
            async with attempt.step("send") as step:
                before = step.version
                effect_id = await step.intent("mailto:team", "send the report")
                assert effect_id and step.version > before and step.intent_open
                await step.receipt("mailto:team", 1_700_000_000_000, "sent", "msg-42", {"n": 1})
                await step.complete()  # the receipt is its evidence
            await _lease_renewed(stack, "lt-sdk")
            await attempt.ready_for_verification()
            briefing = await attempt.briefing()
            assert briefing.state == pb.LONG_TASK_STATE_VERIFYING
            (criterion,) = briefing.criteria
            checked = run_checker("file_exists", {"path": str(report)})
            assert checked is not None
            ack = await attempt.record_verification(
                [verdict(criterion.criterion_id, "file_exists", checked)]
            )
            assert ack.state == pb.LONG_TASK_STATE_COMPLETED, ack.state_reason
    finally:
        await runtime.close()
    view = await stack.reads.view("lt-sdk")
    assert view.task.state is TaskState.COMPLETED
    assert [s.state for s in view.steps] == [StepState.COMPLETED, StepState.COMPLETED]
    (effect,) = view.effects_of("send")
    assert effect.id == effect_id and effect.target == "mailto:team"
    assert effect.idempotency_key == "weekly-1"  # the step's own key
    assert effect.receipt is not None and effect.receipt.external_id == "msg-42"
    (proof,) = view.evidence_of_criterion("c1")
    assert proof.kind == "file" and proof.reference == str(report)


async def test_a_failure_after_the_intent_leaves_the_step_uncertain(
    stack: RuntimeSide, tmp_path: Path
) -> None:
    runtime, start = await _started(stack, _task("lt-fail", tmp_path / "r.md"))
    try:
        async with _attempt(stack, start) as attempt:
            await attempt.briefing()
            with pytest.raises(RuntimeError, match="disk full"):
                async with attempt.step("write"):
                    raise RuntimeError("disk full")  # before any intent: nothing attempted
            view = await stack.reads.view("lt-fail")
            assert view.steps[0].state is StepState.BLOCKED
            await attempt.briefing()
            async with attempt.step("write") as step:  # blocked: begins again
                await step.complete([evidence("file", "r.md", "the report")])
            await attempt.briefing()
            with pytest.raises(ConnectionError):
                async with attempt.step("send") as step:
                    await step.intent("mailto:team", "send the report")
                    raise ConnectionError("the mail server hung up")  # sent or not?
            view = await stack.reads.view("lt-fail")
            assert view.steps[1].state is StepState.UNCERTAIN
            assert view.effects_of("send")[0].receipt is None
            # the attempt cannot replay it by itself: no basis allows a non-idempotent retry
            # after an intent (a person decides)
            await attempt.briefing()
            with pytest.raises(TransitionRefused) as refused:
                async with attempt.step("send"):
                    pass
            assert refused.value.reason == "INVALID_STEP_TRANSITION"
            assert (await stack.reads.view("lt-fail")).steps[1].state is StepState.UNCERTAIN
    finally:
        await runtime.close()


async def test_refusals_carry_their_reason(stack: RuntimeSide, tmp_path: Path) -> None:
    runtime, start = await _started(stack, _task("lt-refused", tmp_path / "r.md"))
    try:
        async with _attempt(stack, start, token="not-the-token") as stranger:
            with pytest.raises(Unauthenticated):
                await stranger.briefing()
        async with _attempt(stack, start) as attempt:
            await attempt.briefing()
            stale = attempt.step("write")
            async with attempt.step("write") as step:
                await step.intent("file:r.md", "write it")
                stale.record = attempt.step_record("write")  # the briefing's old version
                with pytest.raises(VersionConflict) as conflict:
                    await stale.receipt("file:r.md", 1, "written")
                assert conflict.value.reason == "LONG_TASK_VERSION_CONFLICT"
                await step.receipt("file:r.md", 1, "written")
                await step.complete()
    finally:
        await runtime.close()
    view = await stack.reads.view("lt-refused")
    assert view.steps[0].state is StepState.COMPLETED
    assert len(view.effects_of("write")) == 1


async def _driver(stack: RuntimeSide, start: rpb.Start, cwd: Path) -> tuple[int, str]:
    env = attempt_env(stack.address, start)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "truerun_runtime.longtask",
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


async def test_the_step_driver_runs_declared_steps_to_completed(
    stack: RuntimeSide, tmp_path: Path
) -> None:
    report = tmp_path / "report.md"
    sent = tmp_path / "sent.log"
    send = f'echo "key=$TRUERUN_IDEMPOTENCY_KEY token=${{TRUERUN_CALLBACK_TOKEN:-none}}" >> {sent}'
    runtime, start = await _started(stack, _task("lt-driver", report, send=send))
    try:
        code, output = await _driver(stack, start, tmp_path)
    finally:
        await runtime.close()
    assert code == 0, output
    assert report.read_text() == "weekly\n"
    # the effect ran once, with the step's key and without the attempt's secret
    assert sent.read_text() == "key=weekly-1 token=none\n"
    view = await stack.reads.view("lt-driver")
    assert view.task.state is TaskState.COMPLETED, view.task.state_reason
    (effect,) = view.effects_of("send")
    assert effect.receipt is not None and effect.receipt.external_id == "msg-42"
    kinds = sorted(e.kind for e in view.evidence_of_step("write"))
    assert kinds == ["command", "file"]
    written = next(e for e in view.evidence_of_step("write") if e.kind == "file")
    assert "sha256" in written.render
    assert [e.kind for e in view.evidence_of_criterion("c1")] == ["file"]


async def test_the_step_driver_leaves_a_failed_effect_uncertain(
    stack: RuntimeSide, tmp_path: Path
) -> None:
    runtime, start = await _started(
        stack, _task("lt-driver-fail", tmp_path / "r.md", send="exit 7")
    )
    try:
        code, output = await _driver(stack, start, tmp_path)
    finally:
        await runtime.close()
    assert code == 1, output
    view = await stack.reads.view("lt-driver-fail")
    assert [s.state for s in view.steps] == [StepState.COMPLETED, StepState.UNCERTAIN]
    (effect,) = view.effects_of("send")
    assert effect.receipt is None
    assert view.task.state is TaskState.RUNNING  # the watcher ends the attempt; recovery decides
