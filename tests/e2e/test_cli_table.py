"""Every client command's human and ``-o json|yaml`` output, and each error path, against one
real ``truerun dev`` (SQLite) with a real ``truerun agent``, shared by the whole module.

The CLI runs in process (``main(argv)``, what the ``truerun`` script calls), so a table row
costs milliseconds. Reads: a table of (command) -> what its text shows and the keys its JSON
has, in all three formats (YAML is the same data as JSON). Writes: one chain, in order, each
step printing the resource it made as JSON the next step uses. Errors: a table of mistakes
-> exactly one line on stderr, no traceback, exit status 2 (docs/operations.md "The CLI:
scripting and exit statuses")."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from services.cli.main import main
from tests.e2e.conftest import OWNER, Live, _live

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "task.yaml"
MISSING_RUN = "00000000-0000-4000-8000-000000000001"


@dataclass
class World:
    live: Live
    done: str  # a run that succeeded, its output "hello from the table"
    schedule: str
    task: str  # a planned long task (alice's #1)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    request = cast(pytest.FixtureRequest, SimpleNamespace(param="sqlite"))
    started = _live(request, tmp_path_factory.mktemp("cli-table"), {})
    live = next(started)
    try:
        live.start_agent(limit=2)
        done = live.submit("echo hello from the table", task="table-done")
        live.wait_display(done, "succeeded")
        base = ["--server", live.address, "--token", live.api_token]
        code, out, err = _call(
            [
                "schedule",
                "create",
                "nightly",
                "--task",
                "t",
                "--owner",
                OWNER,
                "--cron",
                "0 9 * * *",
            ],
            base,
        )
        assert code == 0, (out, err)
        code, out, _ = _call(["task", "create", "--file", str(EXAMPLE), "-o", "json"], base)
        yield World(live, done, "nightly", json.loads(out)["longTaskId"])
    finally:
        with contextlib.suppress(StopIteration):
            next(started)  # the fixture's teardown: every process killed, none left behind


def _call(argv: list[str], base: list[str]) -> tuple[int | str | None, str, str]:
    """Run ``truerun argv base`` in process; (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code: int | str | None = main([*argv, *base])
        except SystemExit as exited:  # argparse's usage errors
            code = exited.code
    return code, out.getvalue(), err.getvalue()


def _base(world: World) -> list[str]:
    return ["--server", world.live.address, "--token", world.live.api_token]


def _run(world: World, *argv: str) -> str:
    code, out, err = _call(list(argv), _base(world))
    assert code == 0, (argv, code, err)
    assert err == "" or argv[0] == "ls", (argv, err)
    return out


def _json(world: World, *argv: str) -> Any:
    return json.loads(_run(world, *argv, "-o", "json"))


def _lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines()]


# -- reads: (command) -> (what the text shows, the keys the JSON has) -----------------------

READS: list[tuple[tuple[str, ...], tuple[str, ...], set[str]]] = [
    (
        ("ls",),
        ("RUN", "TASK", "STATE", "table-done", "succeeded", "created ", "ran "),
        {"runs", "more"},
    ),
    (
        ("show", "{done}"),
        (
            "created ",
            "started ",
            "(waited ",
            "ended ",
            "(ran ",
            "attempts",
            "claimed ",
            "(took ",
            "run.succeeded",
        ),
        {"run", "attempts", "events"},
    ),
    (
        ("schedule", "ls"),
        ("ID", "TIMING", "NEXT FIRE (local)", "nightly", "(in "),
        {"schedules"},
    ),
    (
        ("schedule", "show", "{schedule}"),
        ("schedule   nightly", "next fires", "created "),
        {"schedule", "upcoming", "events"},
    ),
    (("task", "ls"), ("active", "HANDLE", "#1", "planned", " ago)"), {"longTasks"}),
    (
        ("task", "show", "{task}"),
        ("goal       Publish this week's summary", "(#1)", "attempts   (none)"),
        {"longTaskId", "handle", "goal", "steps"},
    ),
    (("task", "show", "#1"), ("goal       Publish this week's summary",), {"longTaskId", "handle"}),
    (("task", "events", "1"), ("created",), {"events"}),
    (("task", "export", "#1"), ("Publish this week's summary",), {"markdown"}),
]


@pytest.mark.parametrize(
    ("argv", "shows", "keys"), READS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None
)
def test_each_read_in_text_json_and_yaml(
    world: World, argv: tuple[str, ...], shows: tuple[str, ...], keys: set[str]
) -> None:
    args = [a.format(done=world.done, schedule=world.schedule, task=world.task) for a in argv]
    text = _run(world, *args)
    for shown in shows:
        assert shown in text, (args, shown, text)
    as_json = _json(world, *args)
    assert keys <= set(as_json), (args, sorted(as_json))
    assert yaml.safe_load(_run(world, *args, "-o", "yaml")) == as_json
    if args[0] == "show":
        assert as_json["attempts"][0]["claimTime"] and as_json["run"]["id"] == world.done
    if args[:2] == ["task", "show"]:
        assert as_json["longTaskId"] == world.task and as_json["handle"] == "#1"


def test_the_streams_print_one_json_object_per_line(world: World) -> None:
    """watch and logs: JSON Lines (and one YAML document per item), the same items as text."""
    text = _run(world, "logs", world.done)
    assert text == "hello from the table\n"
    chunks = _lines(_run(world, "logs", world.done, "-o", "json"))
    assert "".join(c["text"] for c in chunks) == text
    assert {"attemptId", "attemptNo", "offset", "kind", "text"} <= set(chunks[0])
    assert list(yaml.safe_load_all(_run(world, "logs", world.done, "-o", "yaml"))) == chunks

    watched = _run(world, "watch", world.done)  # exit 0: the run succeeded
    assert watched.splitlines()[-1].split()[1] == "run.succeeded"
    events = _lines(_run(world, "watch", world.done, "-o", "json"))
    assert [e["type"] for e in events] == [line.split()[1] for line in watched.splitlines()]
    assert events[-1]["type"] == "run.succeeded" and events[0]["sequence"] == "1"


# -- writes: each prints the resource it made or changed; the next step uses it ------------


def test_the_writes_print_what_they_made_and_chain(world: World, tmp_path: Path) -> None:
    submitted = _json(
        world,
        "submit",
        "chained",
        "--owner",
        OWNER,
        "--idempotency-key",
        "k-1",
        "--command",
        "true",
    )
    assert set(submitted) == {"run", "existing"} and submitted["existing"] is False
    # the same request under the same key answers the same run (another one is refused:
    # IDEMPOTENCY_KEY_REUSED, docs/state-model.md 6a)
    same = ("submit", "chained", "--owner", OWNER, "--idempotency-key", "k-1", "--command", "true")
    again = _json(world, *same)
    assert again["run"]["id"] == submitted["run"]["id"] and again["existing"] is True
    text = _run(world, *same)
    assert text.startswith(submitted["run"]["id"]) and "(existing run for" in text

    gated = _json(world, "submit", "gated", "--owner", OWNER, "--requires-approval")["run"]
    assert gated["displayState"] == "DISPLAY_STATE_PENDING_APPROVAL"
    approved = _json(world, "approve", gated["id"])["run"]
    assert approved["id"] == gated["id"] and approved["displayState"] != gated["displayState"]

    # no runtime of owner "nobody" is connected: the run stays queued for the operator
    held = _json(world, "submit", "held", "--owner", "nobody")["run"]["id"]
    paused = _json(world, "pause", held, "--reason", "table test")["run"]
    assert paused["id"] == held and paused["displayState"] == "DISPLAY_STATE_PAUSED"
    assert _run(world, "resume", held, "--reason", "table test").split()[2] == "queued"
    assert _json(world, "pause", held, "--reason", "again")["run"]["status"] == "RUN_STATUS_PAUSED"
    resumed = _json(world, "resume", held, "--reason", "again")["run"]
    assert resumed["displayState"] == "DISPLAY_STATE_QUEUED"
    failed = _json(world, "fail", held, "--reason", "never needed")["run"]
    assert failed["status"] == "RUN_STATUS_FAILED"

    retried = _json(world, "retry", held)["run"]
    assert retried["retryOfRunId"] == held and retried["id"] != held
    doomed = _json(world, "submit", "doomed", "--owner", "nobody")["run"]["id"]
    cancelled = _json(world, "cancel", doomed)
    assert set(cancelled) == {"run", "outcome"} and cancelled["outcome"].startswith(
        "CANCEL_OUTCOME_"
    )
    assert cancelled["run"]["status"] == "RUN_STATUS_CANCELLED"

    schedule = _json(
        world, "schedule", "create", "hourly", "--task", "t", "--owner", "nobody", "--every", "1h"
    )
    assert schedule["schedule"]["scheduleId"] == "hourly"
    assert _json(world, "schedule", "pause", "hourly", "--note", "n")["paused"] is True
    assert "resumed; next fire" in _run(world, "schedule", "resume", "hourly")
    fired = _json(world, "schedule", "fire", "hourly")
    assert fired["runs"][0]["runId"]
    hourly_row = next(r for r in _run(world, "schedule", "ls").splitlines() if "hourly" in r)
    assert "(manual): run " + fired["runs"][0]["runId"] in hourly_row, hourly_row
    since, until = (datetime.now(UTC) - timedelta(hours=h) for h in (3, 1))
    window = ["--from", since.isoformat(), "--to", until.isoformat(), "--overlap", "allow_all"]
    backfilled = _json(world, "schedule", "backfill", "hourly", *window)
    assert len(backfilled["runs"]) in (2, 3) and all(r["runId"] for r in backfilled["runs"])
    secret = _json(world, "schedule", "rotate-secret", "hourly")
    assert secret["webhookSecret"] and secret["schedule"]["webhookEnabled"] is True
    assert "deleted schedule hourly" in _run(world, "schedule", "rm", "hourly")

    created = _json(world, "task", "create", "--file", str(EXAMPLE))
    handle = created["handle"]
    assert handle == "#2" and created["state"] == "LONG_TASK_STATE_PLANNED"
    started = _json(world, "task", "start", handle)
    assert started["longTaskId"] == created["longTaskId"]
    assert started["state"] != "LONG_TASK_STATE_PLANNED"
    assert "paused; now paused" in _run(world, "task", "pause", handle, "--note", "n")
    assert _json(world, "task", "resume", handle)["state"] != "LONG_TASK_STATE_PAUSED"
    assert _json(world, "task", "pause", handle)["state"] == "LONG_TASK_STATE_PAUSED"
    acted = _json(world, "task", "act", handle, "cancel", "--owner", "alice", "--action-id", "a-1")
    assert acted["longTask"]["state"] == "LONG_TASK_STATE_CANCELLED"

    # another owner's #1: a bare handle no longer names one task; --owner says whose
    bob = tmp_path / "bob.yaml"
    bob.write_text(EXAMPLE.read_text().replace("owner: alice", "owner: bob"))
    assert _json(world, "task", "create", "--file", str(bob))["handle"] == "#1"
    code, out, err = _call(["task", "show", "#1"], _base(world))
    assert (code, out) == (2, "") and "several owners (alice, bob): pass --owner" in err
    assert _json(world, "task", "show", "#1", "--owner", "alice")["longTaskId"] == world.task


# -- errors: exactly one line on stderr, no traceback, exit 2 -------------------------------

ERRORS: list[tuple[tuple[str, ...], str]] = [
    (("show", MISSING_RUN), "[NOT_FOUND RUN_NOT_FOUND]"),
    (("cancel", MISSING_RUN), "[NOT_FOUND RUN_NOT_FOUND]"),
    (("watch", MISSING_RUN), "[NOT_FOUND RUN_NOT_FOUND]"),
    (("logs", MISSING_RUN), "NOT_FOUND"),
    (("show", "not-a-run-id"), "[INVALID_ARGUMENT"),
    (("logs", "{done}", "--attempt", "7"), "has no attempt 7 [NOT_FOUND]"),
    (("resolve", "{done}", "--as", "failed", "--reason", "r"), "[FAILED_PRECONDITION"),
    (("requeue", "{done}", "--reason", "r"), "[FAILED_PRECONDITION"),
    (("approve", "{done}"), "[FAILED_PRECONDITION"),
    (("ls", "--token", "api-not-a-token"), "[UNAUTHENTICATED"),
    (("ls", "--server", "nonsense://"), "--server 'nonsense://': expected HOST:PORT"),
    (("ls", "--limit", "0"), "0 is out of range (at least 1)"),
    (("submit", "j", "--priority", "99999999999"), "out of range (at most 2147483647)"),
    (("schedule", "create", "x", "--task", "t", "--owner", "o", "--max-attempts", "0"), "range"),
    (("schedule", "show", "no-such-schedule"), "[NOT_FOUND"),
    (("task", "create", "--file", "/nonexistent/task.yaml"), "cannot read it"),
    (("task", "create", "--file", "{garbled}"), "not valid YAML"),
    (("task", "show", "#99"), "has the handle #99 [NOT_FOUND LONG_TASK_NOT_FOUND]"),
    (("task", "show", "no-such-task"), "[NOT_FOUND"),
]


@pytest.mark.parametrize(
    ("argv", "says"), ERRORS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None
)
def test_each_mistake_is_one_line_and_exit_2(
    world: World, tmp_path: Path, argv: tuple[str, ...], says: str
) -> None:
    garbled = tmp_path / "garbled.yaml"
    garbled.write_text("goal: [unclosed\n  steps: {\n")
    args = [a.format(done=world.done, garbled=garbled) for a in argv]
    token = [] if "--token" in args else ["--token", world.live.api_token]
    server = [] if "--server" in args else ["--server", world.live.address]
    code, out, err = _call(args, [*server, *token])
    assert code == 2, (args, code, out, err)
    assert out == "" and err.count("\n") == 1 and err.startswith("error: "), (args, err)
    assert "Traceback" not in err and says in err, (args, err)
