"""The step driver's paths through people and recovery, as a real process against a live
coordinator (SQLite): an approval asked before the intent (granted: the effect runs once;
denied: it never runs, the step is blocked and a person asked), a question step answered
across two attempts, and an uncertain queryable step probed (done: completed from the probe,
the effect never repeated). The scheduler's and the watcher's moves (``start_attempt``,
``attempt_ended``) are the door's, called directly."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from truerun.v1 import runtime_service_pb2 as rpb

from longtasks.domain.model import StepDraft
from longtasks.domain.states import DecisionKind, SideEffect, StepState, TaskState
from longtasks.service.inputs import NewCriterion, NewTask
from tests.support.longtask_runtime import RuntimeSide, attempt_env, runtime_side, until
from tests.support.longtasks import ANA, SCHEDULER, execute
from tests.support.scripted_runtime import ScriptedRuntime

OWNER = "ana"


class Attempts:
    """Starts a task's attempts and runs the step driver for each (its run dispatched to a
    scripted runtime that reports the driver's exit as the run's end)."""

    def __init__(self, stack: RuntimeSide, runtime: ScriptedRuntime, cwd: Path) -> None:
        self.stack, self.runtime, self.cwd = stack, runtime, cwd

    async def start(self, task_id: str) -> tuple[str, rpb.Start]:
        task = await self.stack.reads.task(task_id)
        started = await self.stack.door.start_attempt(task_id, SCHEDULER, task.state_version)
        assert started.made is not None
        await self.runtime.heartbeat(limit=4)
        start = (await self.runtime.expect("start")).start
        await self.runtime.answer_start(start, accepted=True)
        await self.runtime.event(start, 1, rpb.RUNTIME_EVENT_TYPE_ACCEPTED)
        return started.made, start

    async def drive(self, start: rpb.Start) -> int:
        env = attempt_env(self.stack.address, start)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "truerun_runtime.longtask", cwd=self.cwd, env=env
        )
        code = await asyncio.wait_for(process.wait(), 60)
        kind = rpb.RUNTIME_EVENT_TYPE_SUCCEEDED if code == 0 else rpb.RUNTIME_EVENT_TYPE_FAILED
        await self.runtime.event(start, 2, kind, exit_code=code)
        return code


@pytest.fixture
async def attempts(tmp_path: Path) -> AsyncIterator[Attempts]:
    async with runtime_side(f"sqlite:///{tmp_path / 'truerun.db'}") as stack:
        runtime = ScriptedRuntime(stack.runtime, owner=OWNER)
        await runtime.connect()
        try:
            yield Attempts(stack, runtime, tmp_path)
        finally:
            await runtime.close()


async def _create(stack: RuntimeSide, task_id: str, *steps: StepDraft) -> None:
    new = NewTask(
        project_id="proj",
        owner_id=OWNER,
        goal="a goal",
        task_id=task_id,
        steps=steps,
        criteria=(NewCriterion("c1", "it holds", "command", json.dumps({"run": "true"})),),
    )
    created = await stack.door.create(new, ANA)
    await stack.door.enqueue(created.task.id, created.task.state_version, ANA)


def _step(step_id: str, side: SideEffect, action: Mapping[str, object], **more: str) -> StepDraft:
    return StepDraft(step_id, f"step {step_id}", side, action_spec=json.dumps(action), **more)


async def _answer_open(stack: RuntimeSide, task_id: str, kind: DecisionKind, answer: str) -> None:
    """Waits for the task's open decision of ``kind`` and answers it as a person."""

    async def asked() -> bool:
        view = await stack.reads.view(task_id)
        return any(d.kind is kind and d.answer is None for d in view.decisions)

    await until(f"an open {kind}", asked)
    view = await stack.reads.view(task_id)
    decision = next(d for d in view.decisions if d.kind is kind and d.answer is None)
    await stack.door.answer(task_id, decision.id, view.task.state_version, ANA, answer)


@pytest.mark.parametrize("answer", ["grant", "deny"])
async def test_an_approval_comes_before_the_intent(attempts: Attempts, answer: str) -> None:
    ran = attempts.cwd / "deployed"
    deploy = {"run": f"echo once >> {ran}", "approval": "deploy v2 to production"}
    await _create(attempts.stack, "lt-approve", _step("deploy", SideEffect.NON_IDEMPOTENT, deploy))
    _, start = await attempts.start("lt-approve")
    driver = asyncio.create_task(attempts.drive(start))
    await _answer_open(attempts.stack, "lt-approve", DecisionKind.APPROVAL, answer)
    assert await driver == 0
    view = await attempts.stack.reads.view("lt-approve")
    if answer == "grant":
        assert ran.read_text() == "once\n"
        assert view.task.state is TaskState.COMPLETED, view.task.state_reason
        assert view.steps[0].state is StepState.COMPLETED
    else:
        assert not ran.exists()  # denied: the effect never ran, no intent was recorded
        assert view.effects_of("deploy") == []
        assert view.steps[0].state is StepState.BLOCKED
        assert view.task.state is TaskState.WAITING_FOR_USER
        assert any(d.kind is DecisionKind.QUESTION and d.answer is None for d in view.decisions)


async def test_a_question_step_is_answered_across_attempts(attempts: Attempts) -> None:
    ask = {"ask": "Which list gets the report?", "options": ["team", "all"]}
    await _create(attempts.stack, "lt-ask", _step("which", SideEffect.PURE, ask))
    _, start = await attempts.start("lt-ask")
    assert await attempts.drive(start) == 0  # asked: this attempt ends
    view = await attempts.stack.reads.view("lt-ask")
    assert view.task.state is TaskState.WAITING_FOR_USER
    assert view.steps[0].state is StepState.PENDING
    await _answer_open(attempts.stack, "lt-ask", DecisionKind.QUESTION, "team")
    _, start = await attempts.start("lt-ask")
    assert await attempts.drive(start) == 0
    view = await attempts.stack.reads.view("lt-ask")
    assert view.task.state is TaskState.COMPLETED, view.task.state_reason
    (proof,) = view.evidence_of_step("which")
    assert proof.kind == "answer" and "team" in proof.summary


async def test_an_uncertain_queryable_step_is_probed_not_repeated(attempts: Attempts) -> None:
    ran, done = attempts.cwd / "ran", attempts.cwd / "done"
    # the effect happens (done is written), then the command fails: sent or not?
    action = {"run": f"echo run >> {ran} && touch {done} && exit 9"}
    probe = json.dumps({"run": f"test -e {done}"})
    step = _step("charge", SideEffect.QUERYABLE, action, probe_spec=probe)
    await _create(attempts.stack, "lt-probe", step)
    first, start = await attempts.start("lt-probe")
    assert await attempts.drive(start) == 1
    view = await attempts.stack.reads.view("lt-probe")
    assert view.steps[0].state is StepState.UNCERTAIN
    await attempts.stack.door.attempt_ended("lt-probe", first, "its run failed")
    assert (await attempts.stack.reads.task("lt-probe")).state is TaskState.QUEUED
    _, start = await attempts.start("lt-probe")
    assert await attempts.drive(start) == 0
    view = await attempts.stack.reads.view("lt-probe")
    assert view.task.state is TaskState.COMPLETED, view.task.state_reason
    assert ran.read_text() == "run\n"  # the probe found it done: never run again
    assert [e.kind for e in view.evidence_of_step("charge")] == ["probe"]


async def test_an_uncertain_queryable_step_probed_not_done_runs_again(attempts: Attempts) -> None:
    ran, done, second = attempts.cwd / "ran", attempts.cwd / "done", attempts.cwd / "second"
    # the first run fails before its effect (done is not written); a second run succeeds
    action = {
        "run": f"echo run >> {ran}; if [ -e {second} ]; then touch {done}; "
        f"else touch {second}; exit 9; fi"
    }
    probe = json.dumps({"run": f"test -e {done}"})
    step = _step("charge", SideEffect.QUERYABLE, action, probe_spec=probe)
    await _create(attempts.stack, "lt-probe-again", step)
    first, start = await attempts.start("lt-probe-again")
    assert await attempts.drive(start) == 1
    await attempts.stack.door.attempt_ended("lt-probe-again", first, "its run failed")
    _, start = await attempts.start("lt-probe-again")
    assert await attempts.drive(start) == 0
    view = await attempts.stack.reads.view("lt-probe-again")
    assert view.task.state is TaskState.COMPLETED, view.task.state_reason
    assert ran.read_text() == "run\nrun\n"  # the probe said not done: run again, once
    assert len(view.effects_of("charge")) == 2


async def test_a_step_declaring_nothing_runnable_is_blocked_and_a_person_asked(
    attempts: Attempts,
) -> None:
    await _create(
        attempts.stack,
        "lt-nothing",
        _step("vague", SideEffect.IDEMPOTENT, {}, idempotency_key="vague-1"),
    )
    _, start = await attempts.start("lt-nothing")
    assert await attempts.drive(start) == 0
    view = await attempts.stack.reads.view("lt-nothing")
    assert view.steps[0].state is StepState.BLOCKED
    assert view.effects_of("vague") == []  # nothing was attempted
    assert view.task.state is TaskState.WAITING_FOR_USER
    (question,) = [d for d in view.decisions if d.answer is None]
    assert "declares no action" in question.question


async def test_an_idempotent_step_stored_without_a_key_is_put_to_a_person(
    attempts: Attempts,
) -> None:
    """A task written before plans were checked for keys (docs/long-tasks.md "3. Steps"):
    the driver never runs its keyless idempotent step with an empty key (the repro of issue
    #36: a retry made the effect twice); it blocks it and asks a person, no intent, no run."""
    ran = attempts.cwd / "posted"
    post = {"run": f'echo "key=$TRUERUN_IDEMPOTENCY_KEY" >> {ran}'}
    step = _step("post", SideEffect.IDEMPOTENT, post, idempotency_key="post-1")
    await _create(attempts.stack, "lt-keyless", step)
    await execute(
        attempts.stack.stack.app.store,
        "UPDATE long_task_steps SET idempotency_key = NULL WHERE task_id = 'lt-keyless'",
    )
    _, start = await attempts.start("lt-keyless")
    assert await attempts.drive(start) == 0  # a person was asked: this attempt ends
    assert not ran.exists()
    view = await attempts.stack.reads.view("lt-keyless")
    assert view.effects_of("post") == []
    assert view.steps[0].state is StepState.BLOCKED
    assert view.task.state is TaskState.WAITING_FOR_USER
    (question,) = [d for d in view.decisions if d.answer is None]
    assert "step post is idempotent but has no idempotency key" in question.question
