"""The CLI says since when a run shows its state, and for how long (issue #11 §6)."""

from __future__ import annotations

from datetime import datetime

import pytest
from truerun.v1 import common_pb2

from services.cli.client import duration, run_line, since


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (-3, "0s"),
        (42.9, "42s"),
        (60, "1m 00s"),
        (125, "2m 05s"),
        (3599, "59m 59s"),
        (3600, "1h 00m"),
        (7500, "2h 05m"),
        (86400 * 3 + 3600 * 4 + 59, "3d 04h"),
    ],
)
def test_durations_read_like_a_person_would_say_them(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


def test_a_run_line_ends_with_since_when() -> None:
    run = common_pb2.Run(
        id="r1",
        task_id="build",
        display_state=common_pb2.DISPLAY_STATE_UNKNOWN,
        display_reason="the lease lapsed; capacity is held",
    )
    at = datetime(2026, 12, 1, 14, 32, 5).timestamp()
    run.display_since_time.FromMilliseconds(int(at * 1000))
    assert since(run, now_s=at + 185) == "since 14:32:05 (3m 05s)"
    line = run_line(run)
    assert "  unknown (the lease lapsed; capacity is held)  since 14:32:05 (" in line


def test_no_since_when_the_server_did_not_say() -> None:
    run = common_pb2.Run(id="r1", task_id="t", display_state=common_pb2.DISPLAY_STATE_QUEUED)
    assert since(run) == ""
    assert run_line(run).endswith("queued")
