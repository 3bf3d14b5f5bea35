"""Long tasks end to end: a real ``truerun dev`` (its watcher starts attempts and ends them)
and a real ``truerun agent`` (its step driver runs the declared steps), driven only through
LongTaskService, on SQLite and PostgreSQL.

- a pure step writing a file and a non-idempotent shell command with a JSON receipt run to
  ``completed`` under a ``file_exists`` criterion;
- a non-idempotent command failing after its intent is never re-run by itself: the task
  waits for a person with the intent as the question's material; answered "retry", the next
  attempt runs it once more and the task completes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1 import long_task_service_pb2_grpc

from coordinator.api.bearer import with_bearer
from kernel.tls import sync_channel
from tests.e2e.conftest import OWNER, Live, eventually
from tests.support.processes import Processes
from tests.support.tls import make_pki

pytestmark = pytest.mark.e2e

SETTLED = (
    pb.LONG_TASK_STATE_COMPLETED,
    pb.LONG_TASK_STATE_PARTIAL,
    pb.LONG_TASK_STATE_FAILED,
    pb.LONG_TASK_STATE_CANCELLED,
    pb.LONG_TASK_STATE_WAITING_FOR_USER,
    pb.LONG_TASK_STATE_RECOVERY_REQUIRED,
)


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def _draft(task_id: str, report: Path, send: str) -> pb.LongTaskDraft:
    receipt = {"external_id": "msg-9", "target": "mailto:team", "summary": "sent", "at_ms": 1}
    return pb.LongTaskDraft(
        project_id="e2e",
        long_task_id=task_id,
        owner_id=OWNER,
        goal="write the weekly report and send it",
        steps=[
            pb.StepDraft(
                step_id="write",
                title="write the report",
                side_effect=pb.SIDE_EFFECT_CLASS_PURE,
                action=_struct({"run": f"echo weekly > {report}", "writes": str(report)}),
            ),
            pb.StepDraft(
                step_id="send",
                title="send it to the team",
                side_effect=pb.SIDE_EFFECT_CLASS_NON_IDEMPOTENT,
                idempotency_key="weekly-9",
                action=_struct(
                    {"run": f"{send} && echo '{json.dumps(receipt)}'", "receipt": "json"}
                ),
            ),
        ],
        criteria=[
            pb.CriterionDraft(
                criterion_id="c1",
                text="the report exists",
                checker_kind="file_exists",
                checker=_struct({"path": str(report)}),
            )
        ],
    )


def _settled(tasks: long_task_service_pb2_grpc.LongTaskServiceStub, task_id: str) -> pb.LongTask:
    def read() -> pb.LongTask | None:
        task = tasks.GetLongTask(
            pb.GetLongTaskRequest(project_id="e2e", long_task_id=task_id), timeout=10
        )
        return task if task.state in SETTLED else None

    return eventually(read, 90, f"long task {task_id} to settle")


def test_a_long_task_runs_to_completed(live: Live, tmp_path: Path) -> None:
    live.start_agent()
    tasks = long_task_service_pb2_grpc.LongTaskServiceStub(live.channel)
    report, sent = tmp_path / "report.md", tmp_path / "sent.log"
    send = f'echo "$TRUERUN_IDEMPOTENCY_KEY" >> {sent}'
    tasks.CreateLongTask(
        pb.CreateLongTaskRequest(long_task=_draft("lt-e2e", report, send), start=True), timeout=10
    )
    task = _settled(tasks, "lt-e2e")
    assert task.state == pb.LONG_TASK_STATE_COMPLETED, task.state_reason
    assert [s.state for s in task.steps] == [pb.STEP_STATE_COMPLETED] * 2
    assert report.read_text() == "weekly\n" and sent.read_text() == "weekly-9\n"
    send_step = task.steps[1]
    (effect,) = send_step.effects
    assert effect.receipt.external_id == "msg-9" and effect.idempotency_key == "weekly-9"
    (criterion,) = task.criteria
    assert criterion.result == pb.CRITERION_RESULT_PASSED
    assert criterion.result_source == "checker"  # the runtime checker's verdict counted
    assert [a.attempt_no for a in task.attempts] == [1]


def test_a_failed_effect_waits_for_a_person_and_runs_again_only_on_their_word(
    live: Live, tmp_path: Path
) -> None:
    live.start_agent()
    tasks = long_task_service_pb2_grpc.LongTaskServiceStub(live.channel)
    report, tries, marker = tmp_path / "report.md", tmp_path / "tries.log", tmp_path / "second"
    # fails the first time after it "may have sent"; succeeds when run again
    send = f"echo try >> {tries} && if [ -e {marker} ]; then true; else touch {marker}; exit 7; fi"
    tasks.CreateLongTask(
        pb.CreateLongTaskRequest(long_task=_draft("lt-e2e-retry", report, send), start=True),
        timeout=10,
    )
    task = _settled(tasks, "lt-e2e-retry")
    assert task.state == pb.LONG_TASK_STATE_WAITING_FOR_USER, task.state_reason
    assert task.steps[1].state == pb.STEP_STATE_UNCERTAIN
    assert tries.read_text() == "try\n"  # never re-run by the runtime itself
    (question,) = [d for d in task.decisions if d.state == "open"]
    assert question.kind == "effect" and question.step_id == "send"
    assert "send it to the team" in json.dumps(json_format.MessageToDict(question.material))
    tasks.AnswerDecision(
        pb.AnswerDecisionRequest(
            project_id="e2e",
            long_task_id="lt-e2e-retry",
            decision_id=question.decision_id,
            etag=task.etag,
            answer="retry",
        ),
        timeout=10,
    )
    task = _settled(tasks, "lt-e2e-retry")
    assert task.state == pb.LONG_TASK_STATE_COMPLETED, task.state_reason
    assert tries.read_text() == "try\ntry\n"  # once more, on the person's word
    assert [a.attempt_no for a in task.attempts] == [1, 2]


def test_the_step_driver_dials_an_mtls_truerun_as_its_agent_does(tmp_path: Path) -> None:
    """The agent gets its TLS files as flags only (not in its environment): the step driver
    it starts reaches a truerun that requires mTLS with the same files."""
    pki = make_pki(tmp_path / "pki")
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs)
    raw: grpc.Channel | None = None
    try:
        server = procs.dev(tmp_path / "data", {**pki.server_env(mtls=True), **pki.client_env()})
        procs.agent(
            server.address,
            server.token(),
            OWNER,
            tmp_path / "agent",
            extra_args=(
                *("--tls-ca-file", str(pki.ca)),
                *("--tls-client-cert-file", str(pki.client_cert)),
                *("--tls-client-key-file", str(pki.client_key)),
            ),
        )
        raw = sync_channel(server.address, pki.client_files())
        tasks = long_task_service_pb2_grpc.LongTaskServiceStub(with_bearer(raw, server.api_token()))
        report = tmp_path / "report.md"
        draft = _draft("lt-tls", report, "true")
        tasks.CreateLongTask(pb.CreateLongTaskRequest(long_task=draft, start=True), timeout=10)
        task = _settled(tasks, "lt-tls")
        assert task.state == pb.LONG_TASK_STATE_COMPLETED, task.state_reason
        assert report.read_text() == "weekly\n"
    finally:
        if raw is not None:
            raw.close()
        procs.close()
    assert not procs.leftovers()


def test_a_driver_killed_after_the_intent_leaves_the_effect_to_a_person(
    live: Live, tmp_path: Path
) -> None:
    """SIGKILL of the attempt's process between its intent and its receipt: the SDK could
    not mark anything, yet the step becomes uncertain once the run is known to have ended
    (the watcher), and the task waits for a person: the effect is never run again by
    itself."""
    live.start_agent()
    tasks = long_task_service_pb2_grpc.LongTaskServiceStub(live.channel)
    report, tries = tmp_path / "report.md", tmp_path / "tries.log"
    # the effect's shell kills the driver that started it (its parent) mid-effect
    send = f"echo try >> {tries} && kill -9 $PPID"
    draft = _draft("lt-e2e-kill", report, send)
    tasks.CreateLongTask(pb.CreateLongTaskRequest(long_task=draft, start=True), timeout=10)
    task = _settled(tasks, "lt-e2e-kill")
    assert task.state == pb.LONG_TASK_STATE_WAITING_FOR_USER, task.state_reason
    assert [s.state for s in task.steps] == [pb.STEP_STATE_COMPLETED, pb.STEP_STATE_UNCERTAIN]
    (effect,) = task.steps[1].effects
    assert not effect.HasField("receipt")
    (question,) = [d for d in task.decisions if d.state == "open"]
    assert question.kind == "effect" and question.step_id == "send"
    assert tries.read_text() == "try\n"
