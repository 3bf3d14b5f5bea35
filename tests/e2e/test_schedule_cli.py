"""`truerun schedule ...` against a real ``truerun dev``: a schedule created from the command
line fires on its own, lists and shows in words and as JSON, pauses with a note and resumes,
fires on demand into a run the run commands know, backfills a past range once (a second
backfill finds the same runs), is deleted; bad input is one line on stderr and exit 2.

The subject is the CLI, not the store (schedules on both stores are the service's tests), so
this runs on SQLite only. Every wait is a bounded poll of ``schedule show -o json``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.conftest import OWNER, Live, eventually
from tests.support.processes import TRUERUN

pytestmark = pytest.mark.e2e

PROJECT = "e2e"
FIRED = re.compile(r"->  (\S+)(  \(existing\))?$", re.MULTILINE)


def _cli(live: Live, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRUERUN_SERVER": live.address, "TRUERUN_API_TOKEN": live.api_token}
    return subprocess.run(
        [TRUERUN, *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def _ok(live: Live, *args: str) -> str:
    done = _cli(live, *args)
    assert done.returncode == 0, f"truerun {' '.join(args)}: {done.stderr}"
    assert done.stderr == "", done.stderr
    return done.stdout


def _show(live: Live, schedule_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(
        _ok(live, "schedule", "show", schedule_id, "--project", PROJECT, "-o", "json")
    )
    return shown


def _row(live: Live, schedule_id: str) -> str:
    listing = _ok(live, "schedule", "ls", "--project", PROJECT)
    assert listing.splitlines()[0].split()[:3] == ["ID", "TIMING", "ZONE"], listing
    return next(line for line in listing.splitlines() if line.split()[0] == schedule_id)


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _refused(live: Live, says: str, *args: str) -> None:
    done = _cli(live, *args)
    assert done.returncode == 2, (args, done.returncode, done.stderr)
    assert done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("live", ["sqlite"], indirect=True)
def test_schedule_commands_against_a_real_server(live: Live) -> None:
    before = int(time.time())
    created = _ok(
        live,
        *("schedule", "create", "tick", "--project", PROJECT, "--task", "tick"),
        *("--owner", OWNER, "--every", "1s", "--overlap", "allow_all"),
        *("--command", "echo tick", "--name", "Every second"),
    )
    assert "every 1s" in created and "overlap allow_all" in created, created
    assert len(re.findall(r"^  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", created, re.MULTILINE)) == 5

    # It fires on its own, once a second (no agent: the runs wait queued; allow_all).
    def fired() -> list[dict[str, Any]] | None:
        found = [e for e in _show(live, "tick")["events"] if e["type"] == "fired"]
        return found if len(found) >= 3 else None

    events = eventually(fired, 10, "three fires")
    shown = _show(live, "tick")
    assert shown["schedule"]["spec"]["interval"] == "1s"
    assert len(shown["upcoming"]["fires"]) == 5 and shown["upcoming"]["timeZone"] == "UTC"
    assert {e["runId"] for e in events} <= set(shown["schedule"]["openRunIds"])
    text = _ok(live, "schedule", "show", "tick", "--project", PROJECT)
    assert "next fires (local | UTC)" in text and "by scheduler:" in text, text
    row = _row(live, "tick")
    assert "every 1s" in row and "UTC" in row and "fired" in row, row

    # Paused with a note: ls says so instead of a next fire; resumed: a next fire again.
    paused = _ok(live, "schedule", "pause", "tick", "--project", PROJECT, "--note", "vendor outage")
    assert "vendor outage" in paused
    row = _row(live, "tick")
    assert "paused by" in row and "vendor outage" in row, row
    assert _show(live, "tick")["schedule"]["paused"] is True
    assert "resumed" in _ok(live, "schedule", "resume", "tick", "--project", PROJECT)
    assert "paused" not in _row(live, "tick")

    # Fire now: a run the run commands know.
    fire = _ok(live, "schedule", "fire", "tick", "--project", PROJECT)
    (run_id, existing), *more = FIRED.findall(fire)
    assert not more and not existing, fire
    assert run_id in _ok(live, "show", run_id) and live.get(run_id).task_id == "tick"
    assert run_id in _ok(live, "ls", "--project", PROJECT)

    # Backfill 5 past fire times (before the schedule existed): 5 runs; again: the same 5.
    start = before - 10
    backfill = (
        *("schedule", "backfill", "tick", "--project", PROJECT),
        *("--from", _iso(start), "--to", _iso(start + 4), "--overlap", "allow_all"),
    )
    first = FIRED.findall(_ok(live, *backfill))
    assert len(first) == 5 and not any(old for _, old in first), first
    assert len({run for run, _ in first}) == 5
    again = _ok(live, *backfill)
    assert FIRED.findall(again) == [(run, "  (existing)") for run, _ in first], again
    assert "0 new, 5 existing" in again
    assert all(live.get(run).task_id == "tick" for run, _ in first)

    # A webhook secret on demand: shown once, the schedule's webhook turned on.
    rotated = _ok(live, "schedule", "rotate-secret", "tick", "--project", PROJECT)
    assert "whsec_" in rotated and "shown only now" in rotated, rotated
    assert _show(live, "tick")["schedule"]["webhookEnabled"] is True

    # Deleted: gone for show (one line, exit 2); its runs stay.
    assert "deleted" in _ok(live, "schedule", "rm", "tick", "--project", PROJECT)
    _refused(live, "NOT_FOUND", "schedule", "show", "tick", "--project", PROJECT)
    assert live.get(run_id).id == run_id

    # Bad input: one line with the reason, exit 2, no traceback.
    create = ("schedule", "create", "bad", "--project", PROJECT, "--task", "t", "--owner", OWNER)
    _refused(live, "INVALID_ARGUMENT", *create, "--cron", "61 * * * *")
    _refused(live, "INVALID_ARGUMENT", *create, "--every", "10x")
    _refused(live, "INVALID_ARGUMENT", *create, "--at", "tomorrow")
    _refused(live, "not allowed with", *create, "--cron", "* * * * *", "--every", "1m")
    assert "bad" not in _ok(live, "schedule", "ls", "--project", PROJECT)
