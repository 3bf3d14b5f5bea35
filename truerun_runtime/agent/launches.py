"""A task's launches: the supervisor this agent starts for it (in a session of its own, so
it outlives the agent), whether that supervisor may still live, and the abandon marker that
proves a launch never ran its command.

A launch either gets a handle (the supervisor won ``handle.json``) or is abandoned (the agent
won it first): at most one command per launch. A launch that is abandoned before its
supervisor started the command is launched again, up to ``MAX_LAUNCHES``: the supervisor's
death (with an agent SIGKILLed while spawning it, say) is the runtime's fault, not the
command's, and nothing ran. The abandoned launch's files are kept, renamed, for the record.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from .phases import RunnerContext
from .procfs import Proof, create_json_exclusive, prove, read_json, write_json_atomic
from .tasks import TaskPaths, TaskRecord

_ROOT_PACKAGE = __name__.split(".")[0]
_SUPERVISOR_MODULE = f"{__name__.rsplit('.', 1)[0]}.supervisor"
#: How often a task is launched when its supervisor dies before starting the command.
MAX_LAUNCHES = 3


class Launches:
    def __init__(self, record: TaskRecord, paths: TaskPaths, ctx: RunnerContext) -> None:
        self.record = record
        self.paths = paths
        self._ctx = ctx
        self._pid: int | None = None  # our supervisor child, until reaped
        self._reaped = False  # this agent spawned the current supervisor, and reaped it

    @property
    def number(self) -> int:
        """Which launch this is (1 for the first)."""
        return int((read_json(self.paths.launch) or {}).get("launch", 1))

    def start(self, number: int) -> OSError | None:
        """Write ``launch.json`` and start its supervisor; the error when it could not be
        started and the launch is abandoned (so the command provably never runs)."""
        self._record(number)
        return self._spawn()

    def again(self) -> OSError | None:
        """The next launch, after this one was abandoned (the caller checked the limit)."""
        number = self.number + 1
        self._record(number)
        # The new supervisor must not be judged by the old one's record, nor find its slot
        # taken. A crash from here on leaves the count raised and the slot empty or the new
        # supervisor's: a restarted agent follows it or abandons it as any launch.
        for path in (self.paths.supervisor, self.paths.handle):
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, path.with_name(f"{path.stem}.abandoned-{number - 1}.json"))
        return self._spawn()

    def _record(self, number: int) -> None:
        launch = {"argv": self.record.argv, "cwd": self.record.cwd, "launch": number}
        write_json_atomic(self.paths.launch, launch)

    def _spawn(self) -> OSError | None:
        self._reaped = False
        try:
            self._pid = self._ctx.spawn_supervisor(self.record, self.paths)
        except OSError as error:
            if self.abandon():
                return error
        return None

    def abandon(self) -> bool:
        """Claim the handle slot so the supervisor can never start the command."""
        return create_json_exclusive(self.paths.handle, {"abandoned": True, "at": time.time()})

    def supervisor_may_live(self) -> bool:
        self.reap()
        if self._pid is not None:
            return True
        if self._reaped:
            return False  # our own child, and it exited
        record = read_json(self.paths.supervisor)
        if record is not None:
            return prove(record) is Proof.ALIVE
        try:
            launched = self.paths.launch.stat().st_mtime
        except FileNotFoundError:
            return False
        # Started by an earlier life of the agent, and it left no record yet: it may still
        # be starting, or have died with that agent.
        return time.time() - launched < self._ctx.launch_timeout_s

    def reap(self) -> None:
        """Collect our supervisor child once it exited (after a restart it is not ours)."""
        if self._pid is None:
            return
        try:
            pid, _ = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:
            pid = self._pid
        if pid != 0:
            self._pid = None
            self._reaped = True


def spawn_supervisor(paths: TaskPaths, env: dict[str, str]) -> int:
    """Start a task's supervisor in its own session (it outlives the agent); its pid."""
    root = str(Path(sys.modules[_ROOT_PACKAGE].__file__ or "").resolve().parent.parent)
    bootstrap = (
        f"import sys; sys.path.insert(0, {root!r}); "
        f"from {_SUPERVISOR_MODULE} import main; sys.exit(main())"
    )
    argv = [sys.executable, "-I", "-S", "-c", bootstrap, str(paths.dir)]
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    return os.posix_spawn(
        sys.executable,
        argv,
        env,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, str(paths.dir / "supervisor.log"), flags, 0o600),
        ],
        setsid=True,
        setsigmask=(),
        setsigdef=(signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE),
    )
