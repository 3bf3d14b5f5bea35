"""``truerun dev`` and ``truerun agent`` as real subprocesses, and a sweep that leaves none behind.

Every process is started in a process group of its own with its output in a log file. The
commands an agent runs live under supervisors in sessions of their own (they outlive the
agent by design), so teardown finds them three ways: the agent state dir's ``supervisor.json``
and ``handle.json`` files (proven against /proc before any signal), and a marker variable in
the environment each process (and so each supervisor and command) inherits.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from truerun_runtime.agent.procfs import Proof, prove, read_json

TRUERUN = str(Path(sys.executable).with_name("truerun"))
# a TLS listener says so after the address (kernel/tls.py listening())
LISTENING = re.compile(r"^grpc listening on (\S+:\d+)(?: \((?:tls|mtls)\))?$", re.MULTILINE)
STREAM_OPEN = re.compile(r"runtime stream to \S+ open")
MARKER_VAR = "TRUERUN_E2E_MARKER"


class ProcessFailed(AssertionError):
    """A process did not come up (its log is in the message)."""


def _base_env(marker: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without any TRUERUN_* setting, plus ``extra`` and the marker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRUERUN_")}
    env.update(extra)
    env[MARKER_VAR] = marker
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Managed:
    """One subprocess in a new process group (its own session), logging to ``log_path``."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.popen = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.popen.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_for_log(self, pattern: re.Pattern[str], timeout: float = 20.0) -> re.Match[str]:
        """Poll the log (bounded) until ``pattern`` appears; fail if the process exits first."""
        deadline = time.monotonic() + timeout
        while True:
            match = pattern.search(self.log())
            if match is not None:
                return match
            if not self.alive():
                raise ProcessFailed(
                    f"{self.argv[:2]} exited with {self.popen.returncode} before "
                    f"{pattern.pattern!r}:\n{self.log()[-4000:]}"
                )
            if time.monotonic() >= deadline:
                raise ProcessFailed(
                    f"no {pattern.pattern!r} from {self.argv[:2]} within {timeout}s:\n"
                    f"{self.log()[-4000:]}"
                )
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the leader."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the leader, wait (bounded), then SIGKILL the group; the exit code."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return self.popen.returncode


class DevServer(Managed):
    """``truerun dev`` on loopback with a free port."""

    def __init__(
        self, data_dir: Path, env: dict[str, str], log_path: Path, grpc_addr: str = "127.0.0.1:0"
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = [TRUERUN, "dev", "--data-dir", str(data_dir), "--grpc-addr", grpc_addr]
        super().__init__(argv, env, log_path)
        self.data_dir = data_dir
        self.address = ""

    def wait_ready(self, timeout: float = 30.0) -> str:
        self.address = self.wait_for_log(LISTENING, timeout).group(1)
        return self.address

    def token(self) -> str:
        return (self.data_dir / "runtime.token").read_text().strip()

    def api_token(self) -> str:
        """The all-projects operator API token `truerun dev` wrote (no TRUERUN_API_TOKENS)."""
        return (self.data_dir / "api.token").read_text().strip()


class AgentProcess(Managed):
    """``truerun agent``; ready once its stream to truerun is open."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(argv, env, log_path)

    def wait_ready(self, timeout: float = 20.0) -> None:
        self.wait_for_log(STREAM_OPEN, timeout)


class Processes:
    """Starts truerun processes and, on ``close()``, kills every one of them and everything
    they left running (supervisors and commands included)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.marker = f"e2e-{uuid.uuid4().hex}"
        self.started: list[Managed] = []
        self.state_dirs: list[Path] = []
        self._count = 0

    def _log(self, name: str) -> Path:
        self._count += 1
        return self.log_dir / f"{self._count:02d}-{name}.log"

    def dev(
        self,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        grpc_addr: str = "127.0.0.1:0",
    ) -> DevServer:
        """Start ``truerun dev`` (port 0: a free one; or an address to restart on)."""
        extra = {"TRUERUN_GRACE_SECONDS": "1", **(env or {})}
        server = DevServer(data_dir, _base_env(self.marker, extra), self._log("dev"), grpc_addr)
        self.started.append(server)
        server.wait_ready()
        return server

    def agent(
        self,
        server: str,
        token: str,
        owner: str,
        state_dir: Path,
        limit: int = 1,
        extra_args: tuple[str, ...] = (),
        wait: bool = True,
    ) -> AgentProcess:
        if state_dir not in self.state_dirs:
            self.state_dirs.append(state_dir)
        argv = [
            TRUERUN,
            "agent",
            "--server",
            server,
            "--owner",
            owner,
            "--limit",
            str(limit),
            "--state-dir",
            str(state_dir),
            "--log-level",
            "INFO",
            *extra_args,
        ]
        env = _base_env(self.marker, {"TRUERUN_TOKEN": token})
        agent = AgentProcess(argv, env, self._log("agent"))
        self.started.append(agent)
        if wait:
            agent.wait_ready()
        return agent

    def leftovers(self) -> list[int]:
        """Pids of live processes (not zombies) that carry this session's marker."""
        return [pid for pid in marked_pids(self.marker) if pid != os.getpid()]

    def close(self) -> None:
        """Kill everything, in order: agents, commands and supervisors, servers, stragglers."""
        for proc in self.started:
            if isinstance(proc, AgentProcess):
                proc.kill()
        for state_dir in self.state_dirs:
            kill_tasks(state_dir)
        for proc in self.started:
            proc.kill()
        deadline = time.monotonic() + 5.0
        while (pids := self.leftovers()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        for proc in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(5)


def kill_tasks(state_dir: Path) -> None:
    """SIGKILL every command and supervisor of an agent state dir, proven against /proc
    first (a recorded pid alone may name a stranger by now)."""
    tasks = state_dir / "tasks"
    for name in ("handle.json", "supervisor.json"):
        for path in tasks.glob(f"*/{name}"):
            record = read_json(path) or {}
            if prove(record) is not Proof.GONE:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(record["pgid"]), signal.SIGKILL)


def _proc_pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def live_process(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def marked_pids(marker: str) -> list[int]:
    """Live processes whose environment carries ``MARKER_VAR=marker``."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    for pid in _proc_pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in environ.split(b"\0") and live_process(pid):
            found.append(pid)
    return found


def pids_with_arg(marker: str) -> list[int]:
    """Live processes with ``marker`` in their command line."""
    needle = marker.encode()
    found = []
    for pid in _proc_pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in cmdline and pid != os.getpid() and live_process(pid):
            found.append(pid)
    return found
