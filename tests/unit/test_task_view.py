"""How `truerun task` shows long tasks (services/cli/task_view.py), without I/O: the state in
words with the kind of wait, criteria with results and evidence, steps with their classes,
intents and receipts, decisions, plan versions and attempts, the list and the log."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from google.protobuf import struct_pb2, timestamp_pb2
from truerun.v1 import long_task_service_pb2 as pb

from services.cli.task_view import describe, event_line, ls_text, moved_text, state_words

AT_MS = 1_764_590_400_000  # 2025-12-01 12:00:00 UTC


@pytest.fixture(autouse=True)
def _berlin() -> Iterator[None]:
    """Local time is Europe/Berlin here, so the shown times are this machine's, not UTC."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def _at(ms: int = AT_MS) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def _struct(**fields: str) -> struct_pb2.Struct:
    made = struct_pb2.Struct()
    made.update(fields)
    return made


def _task(**fields: object) -> pb.LongTask:
    base: dict[str, object] = {
        "project_id": "default",
        "long_task_id": "lt-1",
        "owner_id": "alice",
        "goal": "Publish this week's summary",
        "etag": "e-7",
        "plan_version": 2,
        "state": pb.LONG_TASK_STATE_RUNNING,
        "create_time": _at(),
        "update_time": _at(),
        "created_by": "user:alice",
    }
    return pb.LongTask(**{**base, **fields})  # type: ignore[arg-type]


def test_the_state_in_words_names_the_kind_of_wait() -> None:
    approval = _task(state=pb.LONG_TASK_STATE_WAITING_FOR_APPROVAL, wait_kind="approval")
    assert state_words(approval) == "waiting for you (approval): waiting for your approval"
    question = _task(
        state=pb.LONG_TASK_STATE_WAITING_FOR_USER,
        wait_kind="decision",
        state_reason="which account?",
    )
    assert (
        state_words(question) == "waiting for you (decision): needs your decision; which account?"
    )
    assert state_words(_task()).startswith("in progress: working on its steps")
    queued = _task(state=pb.LONG_TASK_STATE_QUEUED, queue_position=2)
    assert state_words(queued) == "queued: 2 ahead of it"
    assert moved_text(_task(state=pb.LONG_TASK_STATE_PAUSED), "paused") == (
        "lt-1  paused; now paused: paused by you; it will not go on by itself"
    )


def test_show_has_criteria_steps_decisions_plans_and_attempts() -> None:
    evidence = pb.EvidenceRef(
        kind="file", reference="out/published.txt", summary="sha256 ab12", effect_id="fx-1"
    )
    task = _task(
        state=pb.LONG_TASK_STATE_WAITING_FOR_APPROVAL,
        wait_kind="approval",
        constraints=["never overwrite an older summary"],
        budget=pb.LongTaskBudget(max_attempts=5, attempts_used=2),
        criteria=[
            pb.Criterion(
                criterion_id="published",
                text="The summary is published",
                required=True,
                checker_kind="file_exists",
                checker=_struct(path="out/published.txt"),
                result=pb.CRITERION_RESULT_PASSED,
                result_source="checker:file_exists",
                evidence=[evidence],
            ),
            pb.Criterion(criterion_id="readable", text="Readable", subjective=True),
        ],
        steps=[
            pb.LongTaskStep(
                step_id="publish",
                position=1,
                title="Publish the summary",
                side_effect=pb.SIDE_EFFECT_CLASS_QUERYABLE,
                state=pb.STEP_STATE_UNCERTAIN,
                attempt_count=2,
                action=_struct(run="publish.sh", receipt="json"),
                probe=_struct(run="test -f out/published.txt"),
                probe_result=pb.PROBE_RESULT_UNKNOWN,
                current_effect=pb.SideEffectRecord(
                    target="out/published.txt", summary="copy the summary", try_no=2
                ),
            ),
            pb.LongTaskStep(
                step_id="collect",
                position=2,
                title="Collect",
                side_effect=pb.SIDE_EFFECT_CLASS_PURE,
                state=pb.STEP_STATE_COMPLETED,
                current_effect=pb.SideEffectRecord(
                    target="out/n.txt",
                    summary="write",
                    try_no=1,
                    receipt=pb.Receipt(
                        target="out/n.txt", summary="written", external_id="x-9", time=_at()
                    ),
                ),
            ),
        ],
        decisions=[
            pb.Decision(
                decision_id="d-1",
                kind="approval",
                state="open",
                question="Publish?",
                options=["grant", "deny"],
                subject="publish out/published.txt",
                create_time=_at(),
            )
        ],
        plan_versions=[
            pb.PlanVersion(version=1, author="user", created_by="alice", create_time=_at()),
            pb.PlanVersion(
                version=2,
                author="model",
                reason="split a step",
                created_by="runtime",
                closed_state="",
                create_time=_at(AT_MS + 60_000),
            ),
        ],
        attempts=[
            pb.LongTaskAttempt(
                attempt_no=1,
                run_id="run-1",
                plan_version=1,
                start_time=_at(),
                end_time=_at(AT_MS + 5_000),
                outcome="run_ended",
                reason="killed",
            ),
            pb.LongTaskAttempt(attempt_no=2, run_id="run-2", plan_version=2, start_time=_at()),
        ],
    )
    text = describe(task)
    assert "goal       Publish this week's summary" in text
    assert "state      waiting for you (approval): waiting for your approval" in text
    assert "(stored: waiting_for_approval)" in text and "etag e-7" in text
    assert "attempts 2/5" in text and "  - never overwrite an older summary" in text
    # Times are local (Berlin, UTC+1 in December), not UTC.
    assert "created    2025-12-01 13:00:00 CET by user:alice" in text
    assert "  [passed by checker:file_exists] published: The summary is published" in text
    assert "required, checker file_exists (path=out/published.txt)" in text
    assert "evidence file out/published.txt: sha256 ab12  (receipt fx-1)" in text
    assert "  [not checked yet] readable: Readable" in text
    assert "subjective (a judge or a person decides)" in text
    assert "  1. publish  [uncertain]  queryable, begun 2x  Publish the summary" in text
    assert "runs     receipt=json, run=publish.sh" in text
    assert "probe    run=test -f out/published.txt  (found: unknown)" in text
    assert "intent   out/published.txt: copy the summary  (try 2)" in text
    assert "receipt  (none yet: the effect's outcome is not known)" in text
    assert "receipt  out/n.txt: written id x-9 at 2025-12-01 13:00:00 CET" in text
    assert "  2. collect  [completed]  pure  Collect" in text
    assert "d-1  approval [open]" in text and "options: grant, deny" in text
    assert "action   publish out/published.txt" in text
    assert "  v2  2025-12-01 13:01:00 CET  by model runtime: split a step  (current)" in text
    assert "#1  run run-1  plan v1  2025-12-01 13:00:00 CET -> 2025-12-01 13:00:05 CET" in text
    assert "13:00:05 CET  (took 5s)" in text
    assert "run_ended: killed" in text
    assert "#2  run run-2  plan v2  2025-12-01 13:00:00 CET -> live  (for " in text


def test_an_empty_task_says_so_per_section() -> None:
    text = describe(_task(state=pb.LONG_TASK_STATE_PLANNED))
    for section in ("criteria", "steps", "decisions (newest first)", "attempts"):
        assert f"{section}   (none)" in text


def test_ls_shows_active_then_recent() -> None:
    active = [
        _task(long_task_id="lt-2", handle="#2", state=pb.LONG_TASK_STATE_PAUSED, goal="x " * 60)
    ]
    recent = [_task(long_task_id="lt-1", handle="#1", state=pb.LONG_TASK_STATE_COMPLETED)]
    text = ls_text(active, recent)
    lines = text.splitlines()
    assert lines[0] == "active" and lines[1].split()[:4] == ["ID", "HANDLE", "STATE", "OWNER"]
    assert lines[2].split()[:3] == ["lt-2", "#2", "paused"] and lines[2].endswith("…")
    assert "recent" in lines and "lt-1  #1      completed" in text
    assert ls_text([], []) == "active    (none)"


def test_show_names_where_the_task_came_from() -> None:
    promoted = describe(_task(source_run_id="run-9"))
    assert "source     promoted from run run-9" in promoted
    asked = describe(_task(source_ref="https://chat.example/t/1"))
    assert "source     https://chat.example/t/1" in asked
    assert "source " not in describe(_task())


def test_ls_shows_a_held_task_waiting_for_its_window_not_plain_queued() -> None:
    label = "waiting for its next window at 09:00 CET (truerun must be running)"
    held = pb.LongTaskContinuation(kind="window", waiting=True, label=label)
    queued = [
        _task(long_task_id="lt-3", handle="#3", state=pb.LONG_TASK_STATE_QUEUED, continuation=held),
        _task(long_task_id="lt-4", handle="#4", state=pb.LONG_TASK_STATE_QUEUED, queue_position=2),
    ]
    lines = ls_text(queued, []).splitlines()
    assert f"queued, {label}" in lines[2] and lines[2].startswith("lt-3")
    assert lines[3].split()[:3] == ["lt-4", "#4", "queued"] and "waiting" not in lines[3]


def test_an_event_line_in_local_time() -> None:
    event = pb.LongTaskEvent(
        sequence=3,
        type="state",
        message="paused",
        from_state="running",
        to_state="paused",
        actor_type="user",
        actor_id="alice",
        create_time=_at(),
    )
    assert event_line(event) == (
        "     3  2025-12-01 13:00:00 CET  state              paused  (running -> paused)"
        "  by user:alice"
    )


def test_a_task_waiting_for_its_window_says_so_and_shows_the_catch_up() -> None:
    label = "waiting for its next window at 09:00 (truerun must be running)"
    every = pb.LongTaskContinuation(
        kind="window", cron="0 9 * * *", time_zone="Europe/Berlin", waiting=True, label=label
    )
    every.due_time.CopyFrom(_at(AT_MS + 20 * 3_600_000))  # 2025-12-02 09:00 in Berlin
    every.note = "missed 3 continuations while truerun was not running (09:00..09:00)"
    task = pb.LongTask(
        long_task_id="lt-1",
        state=pb.LONG_TASK_STATE_QUEUED,
        state_reason=label,
        queue_position=0,
        continuation=every,
    )
    assert state_words(task) == f"queued: {label}"
    text = describe(task)
    assert "continue   window: 0 9 * * * (Europe/Berlin), next 2025-12-02 09:00:00 CET" in text
    assert f"catch-up   {every.note}" in text
    assert "continue" not in describe(pb.LongTask(long_task_id="lt-2"))


def test_show_prints_the_servers_progress_and_recovery_prompt_with_its_resolutions() -> None:
    stopped = _task(
        state=pb.LONG_TASK_STATE_RECOVERY_REQUIRED,
        progress="step 2/3 · send the email",
        recovery_prompt="Before it stopped it was working on “send the email”: it failed.",
        recovery_resolutions=["skip", "retry"],
    )
    text = describe(stopped)
    assert "progress   step 2/3 · send the email" in text
    assert "recovery   Before it stopped it was working on “send the email”" in text
    assert "resolve    truerun task clear-recovery lt-1 [--skip | --retry]" in text
    plain = describe(_task())
    assert "progress " not in plain and "recovery " not in plain and "resolve " not in plain
