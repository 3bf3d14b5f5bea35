"""The reference agent through the activation SDK and the step driver's continuations, end to
end (issue #14 "Activation" and "Continuations"; docs/long-tasks.md "Activation and
promotion", "Continuations and catch-up", section 10): a real ``truerun dev`` on SQLite and on
PostgreSQL, a real ``truerun agent`` running ordinary runs whose spec declares tool calls
(the tool runner, ``RuleClassifier``) and a long task whose plan declares a continuation (the
step driver), the tests' effect fixture counting sends. Only the public API is read.

One server and one agent (three slots) for the four runs and the task, at once:

- a plain request and one with only pure calls: no preflight (no ``activation.*`` run
  event), each stays an ordinary run (no task) and succeeds;
- an edit (idempotent) then a send (non-idempotent) in a request with stages: the edit's
  tier is preflighted and stays ordinary, the send's is preflighted and promoted; the task
  holds the edit absorbed as completed on the receipt its command printed, the send ran once
  (fixture count 1) as the task's step in the same run, and the task completes;
- a long task ``before`` / ``continue`` (a window every 2 s) / ``after``: its first attempt
  runs ``before`` and ends waiting for its next window, the watcher's release starts a second
  attempt that completes the wait and runs ``after``; nothing ran twice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2
from truerun.v1 import common_pb2, long_task_service_pb2_grpc, run_service_pb2
from truerun.v1 import long_task_service_pb2 as pb

from tests.e2e.conftest import OWNER, Live, display, eventually, payload
from tests.support.effect_client import effects_of
from tests.support.effect_fixture_process import fixture_process

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLIENT = f"PYTHONPATH={REPO} {sys.executable} -m tests.support.effect_client"
ENDED = ("succeeded", "failed", "cancelled", "timed_out")


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def _tools_run(live: Live, name: str, tools: dict[str, Any]) -> str:
    created = live.runs.CreateRun(
        run_service_pb2.CreateRunRequest(
            project_id="e2e", owner_id=OWNER, task_id=name, spec=_struct({"tools": tools})
        ),
        timeout=10,
    )
    return str(created.run.id)


def _activation(live: Live, run_id: str) -> list[common_pb2.RunEvent]:
    return [e for e in live.events(run_id) if e.type.startswith("activation.")]


def test_the_agent_promotes_only_when_due_and_continues_in_the_next_window(
    live: Live, tmp_path: Path
) -> None:
    tasks = long_task_service_pb2_grpc.LongTaskServiceStub(live.channel)
    notes, looked, trail = tmp_path / "notes.md", tmp_path / "looked.log", tmp_path / "trail.log"
    edits = tmp_path / "edits.log"  # the edit tool's own count of executions
    edited = {"external_id": "rev-7", "target": str(notes), "summary": "notes written", "at_ms": 1}
    with fixture_process(tmp_path / "effects.jsonl") as fixture:
        live.start_agent(limit=3)
        plain = _tools_run(live, "plain", {"text": "What changed in the release?"})
        pure = _tools_run(
            live,
            "pure",
            {
                "text": "Look at the release notes",
                "calls": [{"id": "look", "tier": "pure", "run": f"echo looked >> {looked}"}],
            },
        )
        promoted = _tools_run(
            live,
            "release",
            {
                "text": "Update the release notes, then send them to the team",
                "calls": [
                    {
                        "id": "edit",
                        "title": "edit the notes",
                        "tier": "idempotent",
                        "run": f"echo v2 > {notes} && echo edit >> {edits} && "
                        f"echo '{json.dumps(edited)}'",
                        "receipt": "json",
                    },
                    {
                        "id": "send",
                        "title": "send the notes",
                        "tier": "non_idempotent",
                        "run": f"{CLIENT} post --url {fixture.url} --target mailto:team",
                        "receipt": "json",
                    },
                ],
            },
        )
        later = pb.LongTaskDraft(
            project_id="e2e",
            long_task_id="lt-later",
            owner_id=OWNER,
            goal="do a part now and the rest in the next window",
            steps=[
                pb.StepDraft(
                    step_id=step_id,
                    title=step_id,
                    side_effect=pb.SIDE_EFFECT_CLASS_PURE,
                    action=_struct(action),
                )
                for step_id, action in (
                    ("before", {"run": f"echo before >> {trail}"}),
                    ("wait", {"continue": {"every": "2s", "catchup": "2s"}}),
                    ("after", {"run": f"echo after >> {trail}"}),
                )
            ],
            criteria=[
                pb.CriterionDraft(
                    criterion_id="c1",
                    text="the rest ran",
                    checker_kind="step_completed",
                    checker=_struct({"step_id": "after"}),
                )
            ],
        )
        tasks.CreateLongTask(pb.CreateLongTaskRequest(long_task=later, start=True), timeout=10)

        # (a) a plain request and pure calls: never a preflight, ordinary runs
        for run_id in (plain, pure):
            run = live.wait_for(run_id, lambda r: display(r) in ENDED, 45, "the run to end")
            assert display(run) == "succeeded", (
                run.display_reason,
                live.agent and live.agent.log(),
            )
            assert _activation(live, run_id) == []
        assert looked.read_text() == "looked\n"

        # (b) the send's tier promotes: the edit absorbed with its receipt, the send once
        run = live.wait_for(promoted, lambda r: display(r) in ENDED, 45, "the run to end")
        assert display(run) == "succeeded", (run.display_reason, live.agent and live.agent.log())
        events = _activation(live, promoted)
        assert [e.type for e in events] == [
            "activation.preflight_requested",
            "activation.classified",
            "activation.preflight_requested",
            "activation.classified",
            "activation.promoted",
        ]
        verdicts = [(payload(e)["tier"], payload(e)["verdict"]) for e in events[1:4:2]]
        assert verdicts == [("idempotent", "ordinary"), ("non_idempotent", "promote")]
        task_id = payload(events[-1])["long_task_id"]
        task = eventually(
            lambda: _task_if(tasks, task_id, pb.LONG_TASK_STATE_COMPLETED), 45, "the task"
        )
        assert [a.run_id for a in task.attempts] == [promoted]  # the run is its one attempt
        edit, send = task.steps
        assert (edit.step_id, edit.state, edit.basis) == (
            "edit",
            pb.STEP_STATE_COMPLETED,
            "receipt",
        )
        assert edit.current_effect.receipt.external_id == "rev-7"
        assert edit.attempt_count == 1 and notes.read_text() == "v2\n"
        assert edits.read_text() == "edit\n"  # absorbed, never run again
        assert (send.step_id, send.state, send.attempt_count) == (
            "send",
            pb.STEP_STATE_COMPLETED,
            1,
        )
        assert send.current_effect.receipt.target == "mailto:team"
        assert effects_of(fixture.url, f"{promoted}:send") == 1  # executed exactly once

    # (c) the declared continuation: attempt 1 waits for its window, attempt 2 goes on
    done = eventually(
        lambda: _task_if(tasks, "lt-later", pb.LONG_TASK_STATE_COMPLETED), 45, "lt-later"
    )
    first, second = done.attempts
    assert first.outcome == "continues_later" and "waits for its continuation" in first.reason
    assert second.attempt_no == 2 and second.start_time.ToMilliseconds() >= (
        first.end_time.ToMilliseconds()
    )
    said = [
        e.message
        for e in tasks.ListLongTaskEvents(
            pb.ListLongTaskEventsRequest(project_id="e2e", long_task_id="lt-later"), timeout=10
        ).events
    ]
    assert any("waiting for its next window" in m for m in said), said
    assert [s.state for s in done.steps] == [pb.STEP_STATE_COMPLETED] * 3
    assert [e.kind for e in done.steps[1].evidence] == ["continuation"]
    assert trail.read_text() == "before\nafter\n"  # nothing ran twice


def _task_if(
    tasks: long_task_service_pb2_grpc.LongTaskServiceStub, task_id: str, state: int
) -> pb.LongTask | None:
    task = tasks.GetLongTask(
        pb.GetLongTaskRequest(project_id="e2e", long_task_id=task_id), timeout=10
    )
    settled = task.state not in (
        pb.LONG_TASK_STATE_QUEUED,
        pb.LONG_TASK_STATE_RUNNING,
        pb.LONG_TASK_STATE_VERIFYING,
    )
    assert not settled or task.state == state, (task.state, task.state_reason)
    return task if task.state == state else None
