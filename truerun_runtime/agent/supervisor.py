"""The per-task supervisor (like conmon or a containerd shim): ``python -m
truerun_runtime.agent.supervisor <task dir>``.

The agent starts it in a session of its own, so it outlives the agent (SIGKILL included). It
reads ``launch.json`` ({argv, cwd}) from the task dir and takes the command's environment from
its own. Then:

1. it records itself in ``supervisor.json`` (pid, start ticks, boot id);
2. it forks the command into a new process group, held at a gate before exec;
3. it creates ``handle.json`` {pid, pgid, start ticks, boot id} exclusively - if the agent
   already abandoned the launch (it created the file first), the command never runs;
4. it opens the gate; once exec succeeded it rewrites the handle with ``exec_confirmed``
   (the agent reports RUNNING only then); an exec failure goes to ``status.json``;
5. stdout and stderr of the command go straight to ``output.log`` (no pipe to drain, so the
   output survives the agent and this supervisor);
6. when the command exits it kills what is left of the group (while the unreaped leader still
   holds the pgid, so the signal cannot reach a stranger), reaps it and writes ``status.json``
   {exit_code, signal} atomically. A signal death is exit code 128 + signal number.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from .procfs import create_json_exclusive, identity, read_json, signal_name, write_json_atomic

LAUNCH = "launch.json"
SUPERVISOR = "supervisor.json"
HANDLE = "handle.json"
STATUS = "status.json"
LOG = "output.log"
_RESTORED_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m truerun_runtime.agent.supervisor <task dir>", file=sys.stderr)
        return 2
    task_dir = Path(args[0])
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    write_json_atomic(task_dir / SUPERVISOR, identity(os.getpid()))
    launch = read_json(task_dir / LAUNCH)
    if launch is None:
        write_json_atomic(task_dir / STATUS, _spawn_failure("launch.json is missing"))
        return 1
    return supervise(task_dir, [str(a) for a in launch["argv"]], str(launch["cwd"]))


def supervise(task_dir: Path, argv: list[str], cwd: str) -> int:
    log_fd = os.open(task_dir / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    gate_r, gate_w = os.pipe()
    error_r, error_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(gate_w)
        os.close(error_r)
        _child(argv, cwd, log_fd, gate_r, error_w)
    os.close(gate_r)
    os.close(error_w)
    os.close(log_fd)
    try:
        os.setpgid(pid, pid)  # also done by the child: whichever runs first wins the race
    except OSError:
        pass
    handle = {**identity(pid), "started_at": time.time(), "exec_confirmed": False}
    if not create_json_exclusive(task_dir / HANDLE, handle):
        os.close(gate_w)  # abandoned by the agent: the child exits without running anything
        os.waitpid(pid, 0)
        return 0
    os.write(gate_w, b"1")
    os.close(gate_w)
    exec_error = _read_all(error_r)
    if exec_error:
        os.waitpid(pid, 0)
        write_json_atomic(task_dir / STATUS, _spawn_failure(exec_error.decode(errors="replace")))
        return 0
    write_json_atomic(task_dir / HANDLE, {**handle, "exec_confirmed": True})
    write_json_atomic(task_dir / STATUS, _wait(pid))
    return 0


def _wait(pid: int) -> dict[str, Any]:
    """Wait for the command, clear its group while the zombie leader pins the pgid, reap."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        return {
            "exit_code": 128 + signum,
            "signal": signal_name(signum),
            "finished_at": time.time(),
        }
    return {"exit_code": os.WEXITSTATUS(status), "signal": None, "finished_at": time.time()}


def _spawn_failure(message: str) -> dict[str, Any]:
    return {"exit_code": 127, "signal": None, "spawn_error": message, "finished_at": time.time()}


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _child(argv: list[str], cwd: str, log_fd: int, gate_r: int, error_w: int) -> NoReturn:
    """In the forked child: wait at the gate, then exec. Never returns."""
    try:
        os.setpgid(0, 0)
        if os.read(gate_r, 1) != b"1":
            os._exit(125)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.chdir(cwd)
        for signum in _RESTORED_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        os.execvpe(argv[0], argv, dict(os.environ))
    except BaseException as error:
        try:
            os.write(error_w, f"{type(error).__name__}: {error}".encode())
        finally:
            os._exit(127)


if __name__ == "__main__":
    sys.exit(main())
