"""`truerun watch RUN` against a real ``truerun dev`` (SQLite) and ``truerun agent``: its exit
status says how the run ended (0 succeeded, 1 ended otherwise, 2 could not tell, 130 Ctrl-C),
it follows across a server restart from its last event without printing one twice, and
Ctrl-C or a user mistake ends it with one line on stderr, never a traceback.

Commands that must run "for a while" wait on gate files the test creates; every wait is a
bounded poll of a file or of the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Live, eventually
from tests.support.processes import TRUERUN

pytestmark = pytest.mark.e2e
TERMINAL = ("succeeded", "failed", "cancelled", "timed_out", "lost")


def _env(live: Live) -> dict[str, str]:
    return {**os.environ, "TRUERUN_SERVER": live.address, "TRUERUN_API_TOKEN": live.api_token}


class Watching:
    """``truerun watch`` as a process, its stdout and stderr in files."""

    def __init__(self, env: dict[str, str], tmp_path: Path, run_id: str) -> None:
        name = uuid.uuid4().hex[:8]
        self.out, self.err = tmp_path / f"watch-{name}.out", tmp_path / f"watch-{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.popen = subprocess.Popen(
                [TRUERUN, "watch", run_id],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def sequences(self) -> list[int]:
        return [int(line.split()[0]) for line in self.stdout().splitlines()]

    def printed(self, text: str, timeout: float = 30.0) -> None:
        eventually(lambda: text in self.stdout(), timeout, f"{text!r} on watch's stdout")

    def exit_code(self, timeout: float = 60.0) -> int:
        return self.popen.wait(timeout)


@contextlib.contextmanager
def watching(env: dict[str, str], tmp_path: Path, run_id: str) -> Iterator[Watching]:
    watcher = Watching(env, tmp_path, run_id)
    try:
        yield watcher
    finally:
        if watcher.popen.poll() is None:
            watcher.popen.kill()
        watcher.popen.wait(10)


def _gate(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A gate file and the shell that blocks until it exists."""
    gate = tmp_path / f"gate-{name}"
    return gate, f"while [ ! -e '{gate}' ]; do sleep 0.05; done"


def _one_line(result: subprocess.CompletedProcess[str] | Watching) -> str:
    err = result.stderr() if isinstance(result, Watching) else result.stderr
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("live", ["sqlite"], indirect=True)
def test_watch_follows_a_server_restart_and_exits_by_outcome(live: Live, tmp_path: Path) -> None:
    live.start_agent(limit=1)
    gate, wait = _gate(tmp_path, "after-restart")
    run_id = live.submit(f"echo before; {wait}; exit 3")
    with watching(_env(live), tmp_path, run_id) as watcher:
        watcher.printed("attempt.running")
        live.server.kill()
        live.restart_server()
        # It waited for the server (no exit of its own before the run ends), then reads on.
        assert watcher.popen.poll() is None, watcher.stderr()
        gate.touch()
        assert watcher.exit_code() == 1, watcher.stderr()  # the run failed
        assert watcher.stderr() == ""
        stored = [event.sequence for event in live.events(run_id)]
        assert watcher.sequences() == stored  # every event once, in order, none twice
        assert "run.failed" in watcher.stdout().splitlines()[-1]
    live.wait_display(run_id, *TERMINAL)

    # A run that succeeded (watched after it ended: the replay): 0.
    done = live.submit("true")
    live.wait_display(done, *TERMINAL)
    with watching(_env(live), tmp_path, done) as watcher:
        assert watcher.exit_code() == 0, watcher.stderr()
        assert "run.succeeded" in watcher.stdout().splitlines()[-1]

    # Ctrl-C: 130, one line, the run goes on.
    gate, wait = _gate(tmp_path, "end")
    going = live.submit(f"echo working; {wait}")
    try:
        with watching(_env(live), tmp_path, going) as watcher:
            watcher.printed("attempt.running")
            watcher.popen.send_signal(signal.SIGINT)
            assert watcher.exit_code(timeout=10) == 130
            assert "interrupted" in _one_line(watcher)
    finally:
        gate.touch()
    live.wait_display(going, *TERMINAL)

    # Could not tell: an unknown run, a refused token: 2 and one line.
    for env, says in (
        (_env(live), "NOT_FOUND"),
        ({**_env(live), "TRUERUN_API_TOKEN": "api-not-a-token"}, "UNAUTHENTICATED"),
    ):
        with watching(env, tmp_path, str(uuid.uuid4())) as watcher:
            assert watcher.exit_code(timeout=30) == 2
            assert says in _one_line(watcher) and watcher.stdout() == ""


def test_watch_on_a_dead_server_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "TRUERUN_SERVER": f"127.0.0.1:{port}", "TRUERUN_API_TOKEN": "x"}
    with watching(env, tmp_path, str(uuid.uuid4())) as watcher:
        assert watcher.exit_code(timeout=30) == 2
        assert "UNAVAILABLE" in _one_line(watcher) and watcher.stdout() == ""
