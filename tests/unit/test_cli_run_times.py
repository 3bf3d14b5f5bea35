"""`truerun show` and `ls` say when a run and each attempt was created, claimed, started and
ended, and how long each stretch took; a moment the server did not record is left out."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from truerun.v1 import common_pb2

from services.cli.run_times import attempt_line, attempt_lines, run_span, run_time_lines

T0 = 1_764_594_000.0  # 2025-12-01 13:00:00 UTC


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ")
    else:
        os.environ["TZ"] = before
    time.tzset()


def _run(**offsets: float) -> common_pb2.Run:
    run = common_pb2.Run(id="r1", task_id="build")
    for field, offset in offsets.items():
        getattr(run, field).FromMilliseconds(int((T0 + offset) * 1000))
    return run


def test_an_ended_run_says_how_long_it_waited_and_ran() -> None:
    run = _run(create_time=0, start_time=3, finish_time=3 + 125)
    assert run_time_lines(run, now_s=T0 + 999) == [
        "created    2025-12-01 13:00:00 UTC",
        "started    2025-12-01 13:00:03 UTC   (waited 3s)",
        "ended      2025-12-01 13:02:08 UTC   (ran 2m 05s)",
    ]
    assert run_span(run, T0 + 999) == "ran 2m 05s"


def test_a_running_run_says_for_how_long_and_a_queued_one_nothing_more() -> None:
    running = _run(create_time=0, start_time=60)
    assert run_time_lines(running, now_s=T0 + 60 + 3725)[-1] == (
        "ended      not yet   (running for 1h 02m)"
    )
    queued = _run(create_time=0)
    assert run_time_lines(queued, now_s=T0 + 5) == ["created    2025-12-01 13:00:00 UTC"]
    assert run_span(queued, T0 + 5) == ""


def test_each_attempt_moment_is_the_stretch_since_the_one_before() -> None:
    a = common_pb2.Attempt(id="a1", attempt_no=1, status=common_pb2.ATTEMPT_STATUS_SUCCEEDED)
    for field, offset in (
        ("claim_time", 0),
        ("start_request_time", 0.2),
        ("start_time", 1.5),
        ("finish_time", 126.5),
    ):
        getattr(a, field).FromMilliseconds(int((T0 + offset) * 1000))
    a.exit_code = 0
    assert attempt_line(a, now_s=T0 + 999) == (
        "  #1 a1  succeeded  exit 0  claimed 2025-12-01 13:00:00 UTC  start sent +0s  "
        "started +1s  ended +2m 05s  (took 2m 06s)"
    )


def test_an_attempt_without_an_end_says_for_how_long_so_far() -> None:
    a = common_pb2.Attempt(id="a2", attempt_no=2, status=common_pb2.ATTEMPT_STATUS_RUNNING)
    a.claim_time.FromMilliseconds(int(T0 * 1000))
    line = attempt_line(a, now_s=T0 + 42)
    assert line.endswith("claimed 2025-12-01 13:00:00 UTC  (for 42s so far)")
    assert "ended" not in line and "exit" not in line
    assert attempt_lines([], T0) == ["attempts   (none yet)"]
