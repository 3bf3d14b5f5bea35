"""`truerun task ...` against a real ``truerun dev``: the example request file
(docs/examples/task.yaml) becomes a planned task that lists as active and shows in words and
as JSON (goal, state, criteria with their checkers, steps with their classes, plan
versions); it starts, pauses with a note and resumes, each on the etag the command read;
its log and its Markdown export print; cancelled it lists as recent and cannot continue.
Bad input is one line on stderr and exit 2, a refused move too.

No agent and no watcher run here, so a started task stays queued: the subject is the CLI
(the REST and gRPC tests cover the services). SQLite only, as the schedule CLI's test."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Live
from tests.support.processes import TRUERUN

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "task.yaml"


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


def _show(live: Live, task_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(_ok(live, "task", "show", task_id, "-o", "json"))
    return shown


def _refused(live: Live, says: str, *args: str) -> None:
    done = _cli(live, *args)
    assert done.returncode == 2, (args, done.returncode, done.stderr)
    assert done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("live", ["sqlite"], indirect=True)
def test_task_commands_against_a_real_server(live: Live, tmp_path: Path) -> None:
    created = _ok(live, "task", "create", "--file", str(EXAMPLE))
    task_id = created.split()[0]
    assert "planned: planned, not started" in created, created
    assert "collect (pure), publish (queryable)" in created, created

    shown = _show(live, task_id)
    assert shown["goal"] == "Publish this week's summary" and shown["ownerId"] == "alice"
    assert shown["state"] == "LONG_TASK_STATE_PLANNED" and shown["projectId"] == "default"
    assert [s["sideEffect"] for s in shown["steps"]] == [
        "SIDE_EFFECT_CLASS_PURE",
        "SIDE_EFFECT_CLASS_QUERYABLE",
    ]
    assert shown["steps"][1]["probe"] == {"run": "test -f out/published.txt"}
    text = _ok(live, "task", "show", task_id)
    assert "goal       Publish this week's summary" in text, text
    assert "state      planned: planned, not started" in text
    assert "checker file_exists (path=out/published.txt)" in text
    assert "subjective (a judge or a person decides)" in text
    assert "  2. publish  [pending]  queryable  Publish the summary" in text
    assert "plan versions\n  v1 " in text and "attempts   (none)" in text
    listing = _ok(live, "task", "ls")
    assert listing.startswith("active\nID ") and task_id in listing, listing

    # Start, pause with a note, resume: each reads the etag and sends it.
    assert "started; now queued" in _ok(live, "task", "start", task_id)
    paused = _ok(live, "task", "pause", task_id, "--note", "vendor outage")
    assert "paused; now paused: paused by you" in paused, paused
    assert _show(live, task_id)["state"] == "LONG_TASK_STATE_PAUSED"
    assert "resumed; now queued" in _ok(live, "task", "resume", task_id)

    # The one action contract by the owner's short handle, exactly once per action id.
    assert shown["handle"] == "#1" and f"{task_id} (#1)" in _ok(live, "task", "show", task_id)
    act = ("task", "act", "#1", "pause", "--owner", "alice", "--action-id", "cli-1")
    assert "(#1)  pause done (action cli-1); now paused" in _ok(live, *act)
    assert "pause already done (action cli-1)" in _ok(live, *act)
    _refused(live, "LONG_TASK_NOT_FOUND", "task", "act", "#9", "resume", "--owner", "alice")
    by_id = ("task", "act", task_id, "pause", "--action-id", "cli-1")  # the same task, by id
    assert "pause already done (action cli-1)" in _ok(live, *by_id)
    # (left paused: nothing moves it while the refusals below read and send its etag)

    # A decision that does not exist; a move the rules refuse: one line each, exit 2.
    _refused(live, "NOT_FOUND", "task", "answer", task_id, "d-nope", "yes")
    _refused(live, "INVALID_LONG_TASK_TRANSITION", "task", "clear-recovery", task_id)

    # The log, oldest first, in local time; the export in Markdown.
    events = _ok(live, "task", "events", task_id).splitlines()
    assert len(events) >= 4 and "paused" in "\n".join(events), events
    report = _ok(live, "task", "export", task_id)
    assert report.startswith("#") and "Publish this week's summary" in report, report

    # Cancelled: it lists as recent and cannot continue.
    assert "cancelled; now cancelled" in _ok(live, "task", "cancel", task_id)
    listing = _ok(live, "task", "ls")
    assert "active    (none)" in listing and "recent\n" in listing, listing
    _refused(live, "INVALID_LONG_TASK_TRANSITION", "task", "continue", task_id, "--reason", "again")

    # Bad input: one line with the reason, exit 2, nothing created.
    bad = tmp_path / "task.yaml"
    bad.write_text("goal: g\nowner: o\nsteps: [{id: a, title: A, class: risky}]\n")
    _refused(live, "steps[0].class", "task", "create", "--file", str(bad))
    _refused(live, "cannot read it", "task", "create", "--file", str(tmp_path / "none.yaml"))
    _refused(live, "--reason", "task", "continue", task_id)
    assert len(json.loads(_ok(live, "task", "ls", "-o", "json"))["longTasks"]) == 1
