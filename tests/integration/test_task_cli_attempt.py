"""`truerun task` as a person uses it while a real attempt works (the coordinator serving the
long-task services on loopback, the attempt's run really claimed and started, its step
actions with the callback token its runtime was given): the CLI shows the approval the
attempt waits for, `task answer` grants it on the etag it read, and once the attempt has
recorded intent, receipt, evidence and a passing checker, `task show` tells all of it in
words; `task continue --file` then plans new steps. The CLI is the real `truerun` process.

SQLite only: the subject is the CLI (tests/integration/test_longtask_service.py runs the
services on both stores)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from truerun.v1 import long_task_service_pb2 as lt

from tests.support.auth import TEST_TOKEN
from tests.support.longtask_stack import LongTaskStack, finish_run, longtask_stack, start_attempt
from tests.support.processes import TRUERUN

TASK = "lt-cli"
REQUEST = {
    "id": TASK,
    "project": "proj",
    "goal": "Send the weekly report",
    "owner": "alice",
    "steps": [
        {
            "id": "send",
            "title": "Send it",
            "class": "non_idempotent",
            "run": "send report.md",
            "receipt": "json",
            "approval": "send report.md to the team",
        }
    ],
    "criteria": [
        {
            "id": "sent",
            "text": "The relay accepted it",
            "checker": {"kind": "file_exists", "path": "sent.txt"},
        }
    ],
}


@pytest.fixture
async def stack(sqlite_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(sqlite_url) as live:
        yield live


async def _cli(stack: LongTaskStack, *args: str) -> str:
    """The real `truerun` process (the server is on this event loop: never block it)."""
    env = {**os.environ, "TRUERUN_SERVER": stack.address, "TRUERUN_API_TOKEN": TEST_TOKEN}
    process = await asyncio.create_subprocess_exec(
        TRUERUN, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, f"truerun {' '.join(args)}: {err.decode()}"
    assert err == b"", err
    return out.decode()


async def test_a_person_answers_an_approval_and_reads_the_evidence(
    stack: LongTaskStack, tmp_path: Path
) -> None:
    request = tmp_path / "task.json"
    request.write_text(json.dumps(REQUEST))
    created = await _cli(stack, "task", "create", "--file", str(request), "--start")
    assert created.startswith(f"{TASK}  queued"), created

    live = await start_attempt(stack, TASK, "alice")
    cred = live.credential
    try:
        asked = await stack.attempts.RequestApproval(
            lt.RequestApprovalRequest(
                credential=cred, subject="send report.md to the team", question="Send it now?"
            )
        )
        decision = asked.decision.decision_id
        shown = await _cli(stack, "task", "show", TASK, "--project", "proj")
        assert "state      waiting for you (approval): waiting for your approval" in shown, shown
        assert f"{decision}  approval [open]" in shown
        assert "action   send report.md to the team" in shown

        answered = await _cli(
            stack, "task", "answer", TASK, decision, "grant", "--project", "proj", "--note", "ok"
        )
        assert f"answered {decision} with 'grant'; now in progress" in answered, answered

        # The attempt goes on: intent, receipt, evidence; verified by its checker.
        task = await stack.tasks.GetLongTask(
            lt.GetLongTaskRequest(project_id="proj", long_task_id=TASK)
        )
        begun = await stack.attempts.BeginStep(
            lt.BeginStepRequest(credential=cred, step_id="send", step_version=task.steps[0].version)
        )
        intent = await stack.attempts.RecordIntent(
            lt.RecordIntentRequest(
                credential=cred,
                step_id="send",
                step_version=begun.step.version,
                target="team@example.org",
                summary="the weekly report",
            )
        )
        receipt = lt.Receipt(external_id="msg-42", target="team@example.org", summary="relayed")
        receipt.time.FromMilliseconds(1_764_000_000_000)
        got = await stack.attempts.RecordReceipt(
            lt.RecordReceiptRequest(
                credential=cred, step_id="send", step_version=intent.step.version, receipt=receipt
            )
        )
        await stack.attempts.CompleteStep(
            lt.CompleteStepRequest(credential=cred, step_id="send", step_version=got.step.version)
        )
        await stack.attempts.ReadyForVerification(lt.ReadyForVerificationRequest(credential=cred))
        verified = await stack.attempts.RecordVerification(
            lt.RecordVerificationRequest(
                credential=cred,
                verdicts=[
                    lt.Verdict(
                        criterion_id="sent",
                        source="checker:file_exists",
                        result=lt.CRITERION_RESULT_PASSED,
                        evidence=[
                            lt.EvidenceRef(kind="file", reference="sent.txt", summary="exists")
                        ],
                    )
                ],
            )
        )
        assert verified.state == lt.LONG_TASK_STATE_COMPLETED
        await finish_run(live)
    finally:
        await live.runtime.close()

    shown = await _cli(stack, "task", "show", TASK, "--project", "proj")
    assert "state      completed: done: every required criterion proven" in shown, shown
    assert "  [passed by checker] sent: The relay accepted it" in shown
    assert "evidence file sent.txt: exists" in shown
    assert "  1. send  [completed]  non_idempotent, begun 1x  Send it" in shown
    assert "intent   team@example.org: the weekly report" in shown
    assert "receipt  team@example.org: relayed id msg-42" in shown
    assert "answer   grant (ok) by tester" in shown
    assert "#1  run " in shown and "verified" in shown

    report = await _cli(stack, "task", "export", TASK, "--project", "proj")
    assert report.startswith(f"# Long task {TASK}") and "msg-42" in report, report
    page = await _cli(stack, "task", "export", TASK, "--project", "proj", "--html")
    assert page.startswith("<!DOCTYPE html>") and "msg-42" in page, page

    # Go on with new steps from a file: a new plan version, queued for a new attempt.
    more = tmp_path / "more.yaml"
    more.write_text(
        "steps:\n  - {id: archive, title: Archive it, class: idempotent, idempotency_key: a-1}\n"
    )
    continued = await _cli(
        stack,
        "task",
        "continue",
        TASK,
        "--project",
        "proj",
        "--reason",
        "archive too",
        "--file",
        str(more),
    )
    assert "continued as plan v2; now queued" in continued, continued
    after = json.loads(await _cli(stack, "task", "show", TASK, "--project", "proj", "-o", "json"))
    assert [s["stepId"] for s in after["steps"]] == ["archive"]
    assert after["planVersion"] == 2 and after["planVersions"][-1]["reason"] == "archive too"


async def test_a_keyless_idempotent_step_is_one_line_and_nothing_is_created(
    stack: LongTaskStack, tmp_path: Path
) -> None:
    """The CLI refuses the plan of issue #36's repro before sending it (docs/long-tasks.md
    "3. Steps"): one line naming the step's place in the file, never a traceback."""
    request = tmp_path / "task.yaml"
    request.write_text(
        "id: lt-keyless\nproject: proj\ngoal: Notify the team\nowner: alice\nsteps:\n"
        "  - {id: notify, title: POST it, class: idempotent, run: 'post --key x'}\n"
    )
    env = {**os.environ, "TRUERUN_SERVER": stack.address, "TRUERUN_API_TOKEN": TEST_TOKEN}
    process = await asyncio.create_subprocess_exec(
        *(TRUERUN, "task", "create", "--file", str(request)),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2 and out == b""
    assert err.decode().splitlines() == [
        "error: steps[0].idempotency_key: required for an idempotent step (a key that stays"
        " the same on every attempt), or declare it queryable or non_idempotent"
        " [INVALID_ARGUMENT]"
    ]
    listed = await stack.tasks.ListLongTasks(lt.ListLongTasksRequest(project_id="proj"))
    assert list(listed.long_tasks) == []
