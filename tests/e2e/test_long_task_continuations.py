"""Offline catch-up of a long task's continuation, end to end (docs/long-tasks.md
"Continuations and catch-up"; seed C "离线与补跑窗口"): a real ``truerun dev`` on SQLite and
on PostgreSQL, driven only through LongTaskService.

A person schedules the task's next attempt in a window that opens every second (a 6-field
cron of 40 consecutive seconds, the first one 6-7 s ahead) with a 2 s catch-up window; while it
waits the task says so. The server is killed before the first window and started again
after more than three windows passed: the missed windows coalesce into one release, so the
task gets exactly one attempt (not one per window), and "missed N continuations while
truerun was not running" is in its view and its log. A second request with the etag read
before is refused and changes nothing (a duplicate is a no-op)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import duration_pb2
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1 import long_task_service_pb2_grpc

from tests.e2e.conftest import OWNER, Live, eventually

pytestmark = pytest.mark.e2e

LEAD_S = 6  # the first window opens this long after the request: time to kill the server
WINDOWS = 40  # consecutive seconds of windows: room for a slow restart (LEAD_S + 41 < 60)
MISSED = re.compile(r"missed (\d+) continuations? while truerun was not running")


def _seconds(s: float) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromMilliseconds(int(s * 1000))
    return value


def _every_second_from(first: int) -> str:
    """A cron (seconds first, UTC) opening at ``first`` and each second of the WINDOWS - 1
    after it (every minute: no second of it lies between now and ``first``)."""
    seconds = sorted({(first + i) % 60 for i in range(WINDOWS)})
    return f"{','.join(str(s) for s in seconds)} * * * * *"


def test_windows_missed_while_stopped_coalesce_into_one_attempt(live: Live) -> None:
    tasks = long_task_service_pb2_grpc.LongTaskServiceStub(live.channel)
    draft = pb.LongTaskDraft(
        project_id="e2e",
        long_task_id="lt-window",
        owner_id=OWNER,
        goal="sync the mirror in its window",
        steps=[pb.StepDraft(step_id="sync", title="sync", side_effect=pb.SIDE_EFFECT_CLASS_PURE)],
    )
    created = tasks.CreateLongTask(pb.CreateLongTaskRequest(long_task=draft), timeout=10)
    first = int(time.time()) + LEAD_S + 1
    spec = pb.ContinuationSpec(
        cron=_every_second_from(first), catchup_window=_seconds(2), reason="in its window"
    )
    ask = pb.ScheduleContinuationRequest(
        project_id="e2e", long_task_id="lt-window", etag=created.etag, continuation=spec
    )
    waiting = tasks.ScheduleContinuation(ask, timeout=10)
    with pytest.raises(grpc.RpcError) as stale:  # the same request again: the etag moved on
        tasks.ScheduleContinuation(ask, timeout=10)
    assert stale.value.code() == grpc.StatusCode.ABORTED
    live.server.kill()  # truerun is not running (SIGKILL: no drain to wait for)
    assert time.time() < first, f"the server was killed {time.time() - first:.1f}s after the window"
    # A whole minute reads 21:21, any other second 21:21:05 (kernel.calendar.clock_text).
    at = datetime.fromtimestamp(first, UTC)
    opened = at.strftime("%H:%M:%S" if at.second else "%H:%M")
    assert waiting.state == pb.LONG_TASK_STATE_QUEUED and not waiting.attempts
    assert waiting.continuation.waiting
    assert waiting.continuation.label == (
        f"waiting for its next window at {opened} (truerun must be running)"
    )
    assert waiting.state_reason == waiting.continuation.label

    # ``first`` is 6-7 s ahead of the request, so the clock needs up to 10.2 s from here: the
    # bound is that plus slack (a fixed 10 s bound failed whenever the request landed early in
    # its second).
    until = first + 3.2
    eventually(lambda: time.time() >= until, until - time.time() + 5, "three windows to pass")
    live.restart_server()

    def fired() -> pb.LongTask | None:
        task = tasks.GetLongTask(
            pb.GetLongTaskRequest(project_id="e2e", long_task_id="lt-window"), timeout=10
        )
        return task if task.attempts else None

    task = eventually(fired, 60, "the continuation to release the task")
    assert [a.attempt_no for a in task.attempts] == [1]  # one attempt, not one per window
    assert task.state == pb.LONG_TASK_STATE_RUNNING
    note = task.continuation.note
    print(f"[{live.backend}] {note}")
    count = MISSED.search(note)
    assert count is not None and int(count.group(1)) >= 2, note  # at least `first`, `first`+1
    assert task.continuation.missed_total == int(count.group(1))
    assert not task.continuation.waiting and task.continuation.HasField("fire_time")
    log = tasks.ListLongTaskEvents(
        pb.ListLongTaskEventsRequest(project_id="e2e", long_task_id="lt-window"), timeout=10
    ).events
    fired_events = [e for e in log if e.type == "continuation_fired"]
    assert len(fired_events) == 1 and fired_events[0].message == note
    assert [e.type for e in log].count("attempt_started") == 1
