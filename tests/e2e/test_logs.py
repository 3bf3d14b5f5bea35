"""`truerun logs RUN [-f]` against a real ``truerun dev`` and ``truerun agent``: it prints a
run's output exactly (the output store, not the event log), follows it across attempts until
the run ends, keeps following across a server restart without printing anything twice, and
Ctrl-C ends it quietly.

Commands that must run "for a while" wait on gate files the test creates; every wait is a
bounded poll of a file or of the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Live, display, eventually
from tests.support.processes import TRUERUN

pytestmark = pytest.mark.e2e

TERMINAL = ("succeeded", "failed", "cancelled", "timed_out", "lost")


def _env(live: Live) -> dict[str, str]:
    return {**os.environ, "TRUERUN_SERVER": live.address, "TRUERUN_API_TOKEN": live.api_token}


def _logs(live: Live, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRUERUN, "logs", *args], env=_env(live), capture_output=True, text=True, timeout=30
    )


class Following:
    """``truerun logs -f`` as a process, its stdout and stderr in files."""

    def __init__(self, live: Live, tmp_path: Path, run_id: str) -> None:
        name = uuid.uuid4().hex[:8]
        self.out, self.err = tmp_path / f"logs-{name}.out", tmp_path / f"logs-{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.popen = subprocess.Popen(
                [TRUERUN, "logs", "-f", run_id],
                env=_env(live),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def printed(self, text: str, timeout: float = 30.0) -> None:
        eventually(lambda: text in self.stdout(), timeout, f"{text!r} on logs -f's stdout")

    def exit_code(self, timeout: float = 60.0) -> int:
        return self.popen.wait(timeout)


@contextlib.contextmanager
def following(live: Live, tmp_path: Path, run_id: str) -> Iterator[Following]:
    follower = Following(live, tmp_path, run_id)
    try:
        yield follower
    finally:
        if follower.popen.poll() is None:
            follower.popen.kill()
        follower.popen.wait(10)


def _gate(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A gate file and the shell that blocks until it exists."""
    gate = tmp_path / f"gate-{name}"
    return gate, f"while [ ! -e '{gate}' ]; do sleep 0.05; done"


def test_logs_prints_and_follows_every_attempt_to_the_end(live: Live, tmp_path: Path) -> None:
    live.start_agent(limit=1)
    gate, wait = _gate(tmp_path, "fail-first")
    marker = tmp_path / "second-attempt"
    command = (
        f"if [ -e '{marker}' ]; then echo 'second: ünïcode ✓'; exit 0; fi; "
        f"touch '{marker}'; echo 'first 1'; echo 'first 2'; {wait}; echo 'first 3'; exit 3"
    )
    run_id = live.submit(command, max_attempts=2)
    with following(live, tmp_path, run_id) as follower:
        follower.printed("first 2\n")
        assert follower.popen.poll() is None  # the run is live: -f goes on
        gate.touch()
        assert follower.exit_code() == 0, follower.stderr()
        run = live.wait_display(run_id, *TERMINAL)
        assert display(run) == "succeeded" and run.attempt_count == 2
        assert follower.stdout() == "first 1\nfirst 2\nfirst 3\nsecond: ünïcode ✓\n"
        assert follower.stderr() == "--- attempt 2 ---\n"

    # Without -f: the current attempt's output, as it is; --attempt picks another.
    current = _logs(live, run_id)
    assert (current.returncode, current.stdout) == (0, "second: ünïcode ✓\n"), current.stderr
    first = _logs(live, "--attempt", "1", run_id)
    assert (first.returncode, first.stdout) == (0, "first 1\nfirst 2\nfirst 3\n"), first.stderr
    by_id = _logs(live, "--attempt", run.current_attempt_id, run_id)
    assert by_id.stdout == current.stdout

    # Errors: one line on stderr, a non-zero status, nothing on stdout.
    for args, says in (
        ((str(uuid.uuid4()),), "NOT_FOUND"),
        (("--attempt", "3", run_id), "has no attempt 3"),
        (("--token", "api-not-a-token", run_id), "UNAUTHENTICATED"),
    ):
        failed = _logs(live, *args)
        assert failed.returncode != 0 and failed.stdout == "", args
        assert failed.stderr.count("\n") == 1 and says in failed.stderr, failed.stderr


def test_logs_follow_survives_a_server_restart(live: Live, tmp_path: Path) -> None:
    live.start_agent(limit=1)
    gate, wait = _gate(tmp_path, "after-restart")
    lines = [f"after {i}" for i in range(1, 21)]
    run_id = live.submit(f"echo before; {wait}; " + "; ".join(f"echo '{x}'" for x in lines))
    with following(live, tmp_path, run_id) as follower:
        follower.printed("before\n")
        live.server.kill()
        live.restart_server()
        # It kept trying while the server was away (and does not exit on its own before
        # the run ends), then reads on from where it was.
        assert follower.popen.poll() is None, follower.stderr()
        gate.touch()
        assert follower.exit_code() == 0, follower.stderr()
        assert follower.stdout() == "before\n" + "".join(f"{x}\n" for x in lines)
        assert "Traceback" not in follower.stderr()
    assert display(live.wait_display(run_id, *TERMINAL)) == "succeeded"


def test_ctrl_c_ends_logs_follow_quietly(live: Live, tmp_path: Path) -> None:
    live.start_agent(limit=1)
    gate, wait = _gate(tmp_path, "end")
    run_id = live.submit(f"echo working; {wait}")
    try:
        with following(live, tmp_path, run_id) as follower:
            follower.printed("working\n")
            follower.popen.send_signal(signal.SIGINT)
            assert follower.exit_code(timeout=10) == 130
            assert follower.stderr() == ""
            assert follower.stdout() == "working\n"
    finally:
        gate.touch()
    live.wait_display(run_id, *TERMINAL)
