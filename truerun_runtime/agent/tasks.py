"""A task's durable record and its directory in the state dir.

``<state>/tasks/<name>/``:
  task.json        what to run (written when the Start is accepted; immutable)
  launch.json      {argv, cwd, launch} for the supervisor (written just before it starts;
                   launch counts the launches, launches.py)
  supervisor.json  the supervisor's identity (written by the supervisor)
  handle.json      the command's durable handle (written by the supervisor before exec)
  status.json      the exit status (written by the supervisor, atomically)
  stop.json        a stop the agent decided on (cancel, timeout, self-fence) and its progress
  output.log       stdout + stderr of the command, complete
  work/            the working directory when Start names no workspace
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from truerun.v1 import runtime_service_pb2 as pb

from truerun_runtime.longtask.toolspec import TOOLS, TOOLS_ENV, ToolSpecError, parse_tools

from .procfs import read_json, write_json_atomic
from .supervisor import HANDLE, LAUNCH, LOG, STATUS, SUPERVISOR

_SAFE = re.compile(r"^[A-Za-z0-9._-]{1,96}$")
STOP = "stop.json"
TASK = "task.json"


class SpecError(ValueError):
    """The Start's spec cannot be run (the Start is refused before anything started)."""


@dataclass(frozen=True)
class Spec:
    argv: list[str]
    timeout_s: float | None = None
    grace_ms: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: env name -> the name of a secret this runtime resolves (truerun never had its value)
    secret_env: dict[str, str] = field(default_factory=dict)
    #: a process that talks to truerun itself (a long task's step driver, an ordinary run's
    #: tool runner): it needs truerun's address
    long_task: bool = False


SECRET_REF = "secret_ref"
LONG_TASK = "long_task"
#: what runs a long task's attempt whose spec names no command: the step driver
LONG_TASK_ARGV = (sys.executable, "-m", "truerun_runtime.longtask")
#: what runs an ordinary run whose spec declares tool calls and no command: the tool runner
TOOLS_ARGV = (*LONG_TASK_ARGV, "tools")
_SECRET_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def parse_spec(spec: dict[str, Any]) -> Spec:
    """``{"command": "<shell>"}`` or ``{"argv": [...]}``, optionally ``timeout_s``,
    ``grace_ms`` (for timeouts) and ``env`` (string values). A long task's attempt
    (``{"long_task": {...}}`` and no command) runs the step driver; an ordinary run that
    declares tool calls (``{"tools": {...}}`` and no command) runs the tool runner, given
    the section in TRUERUN_TOOLS (docs/runtime-protocol.md "Declared tool calls")."""
    command, argv = spec.get("command"), spec.get("argv")
    long_task = LONG_TASK in spec and command is None and argv is None
    tools = TOOLS in spec and command is None and argv is None and not long_task
    extra_env: dict[str, str] = {}
    if long_task:
        if not isinstance(spec[LONG_TASK], dict):
            raise SpecError("long_task must be an object")
        args = list(LONG_TASK_ARGV)
    elif tools:
        try:
            parse_tools(spec[TOOLS])
        except ToolSpecError as error:
            raise SpecError(str(error)) from None
        args = list(TOOLS_ARGV)
        extra_env[TOOLS_ENV] = json.dumps(spec[TOOLS], separators=(",", ":"))
    elif isinstance(command, str) and command.strip() and argv is None:
        args = ["/bin/sh", "-c", command]
    elif isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        if command is not None:
            raise SpecError("spec has both command and argv")
        args = list(argv)
    else:
        raise SpecError('spec needs "command" (a non-empty string) or "argv" (strings)')
    timeout = spec.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise SpecError("timeout_s must be a positive number")
    grace = spec.get("grace_ms")
    if grace is not None and (not isinstance(grace, int | float) or grace < 0):
        raise SpecError("grace_ms must be a number >= 0")
    env = spec.get("env") or {}
    if not isinstance(env, dict):
        raise SpecError('env must map names to strings or {"secret_ref": NAME}')
    plain = {str(k): v for k, v in env.items() if isinstance(v, str)} | extra_env
    refs = {str(k): _secret_ref(v) for k, v in env.items() if not isinstance(v, str)}
    return Spec(
        args,
        float(timeout) if timeout is not None else None,
        int(grace) if grace is not None else None,
        plain,
        refs,
        long_task or tools,
    )


def _secret_ref(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {SECRET_REF}:
        name = value[SECRET_REF]
        if isinstance(name, str) and _SECRET_NAME.match(name):
            return name
    raise SpecError('env must map names to strings or {"secret_ref": NAME}')


def spec_dict(spec: pb.Start) -> dict[str, Any]:
    return json_format.MessageToDict(spec.spec)


@dataclass(frozen=True)
class TaskRecord:
    """One task the agent accepted: an attempt from truerun, or a manual local task."""

    task_id: str  # the runtime task id (manual tasks: "manual-<uuid>")
    attempt_id: str  # "" for a manual task
    run_id: str
    callback_token: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    order_key: int  # the local queue's order (front_of_queue: negative)
    accepted_at: float
    timeout_s: float | None = None
    grace_ms: int | None = None
    self_fence_after_ms: int = 0
    trace_parent: str = ""  # the Start's W3C traceparent, echoed on every event
    #: env name -> secret name, resolved only when the command starts (never on disk here)
    secret_env: dict[str, str] = field(default_factory=dict)
    #: a process that talks to truerun (step driver, tool runner), given its address (``env``)
    long_task: bool = False

    @property
    def manual(self) -> bool:
        return not self.attempt_id

    @property
    def key(self) -> str:
        """How the agent names the task: its attempt, or its manual task id."""
        return self.attempt_id or self.task_id

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRecord:
        return cls(**data)


class TaskPaths:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.task = directory / TASK
        self.launch = directory / LAUNCH
        self.supervisor = directory / SUPERVISOR
        self.handle = directory / HANDLE
        self.status = directory / STATUS
        self.stop = directory / STOP
        self.log = directory / LOG
        self.work = directory / "work"

    @classmethod
    def for_key(cls, tasks_dir: Path, key: str) -> TaskPaths:
        name = key if _SAFE.match(key) and not key.startswith(".") else _hashed(key)
        return cls(tasks_dir / name)

    def create(self, record: TaskRecord) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_json_atomic(self.task, record.to_json())

    def load(self) -> TaskRecord | None:
        data = read_json(self.task)
        return TaskRecord.from_json(data) if data is not None else None


def _hashed(key: str) -> str:
    return "h-" + hashlib.sha256(key.encode()).hexdigest()[:32]
