"""Shared helpers for the runtime agent tests: bounded polling, agents in-process and as
processes, and a sweep that leaves no process behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from truerun_runtime.agent.agent import Agent
from truerun_runtime.agent.procfs import Proof, prove, read_json

OWNER = "owner-1"
TOKEN = "runtime-token-1"


async def eventually(
    predicate: Callable[[], Any], timeout: float = 10.0, what: str = "", step: float = 0.02
) -> Any:
    """Poll ``predicate`` until it is truthy (bounded); return its value."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await asyncio.sleep(step)
    return value


@dataclass
class RunningAgent:
    agent: Agent
    task: asyncio.Task[None]
    stopped: bool = field(default=False)

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.agent.stop()
            await asyncio.wait_for(self.task, 10)


class AgentProcess:
    """``python -m truerun_runtime.agent`` as a real process (it can be SIGKILLed)."""

    def __init__(
        self, address: str, state_dir: Path, limit: int = 1, instance_id: str = ""
    ) -> None:
        self.address = address
        self.state_dir = state_dir
        self.limit = limit
        self.instance_id = instance_id  # empty: the id stored in the state dir
        self.process: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        env = {**os.environ, "TRUERUN_TOKEN": TOKEN}
        log = open(self.state_dir.parent / f"agent-{self.runs}.log", "wb")
        with log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "truerun_runtime.agent",
                    "--server",
                    self.address,
                    "--owner",
                    OWNER,
                    "--state-dir",
                    str(self.state_dir),
                    "--limit",
                    str(self.limit),
                    "--log-level",
                    "DEBUG",
                    *(["--instance-id", self.instance_id] if self.instance_id else []),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def handle_of(state_dir: Path, attempt_id: str) -> dict[str, Any]:
    handle = read_json(state_dir / "tasks" / attempt_id / "handle.json")
    assert handle is not None, f"no handle for {attempt_id}"
    return handle


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def sweep(root: Path) -> None:
    """Kill every command still running under ``root`` and reap our supervisor children."""
    for path in root.glob("**/tasks/*/handle.json"):
        handle = read_json(path) or {}
        if prove(handle) is Proof.ALIVE:
            os.killpg(int(handle["pgid"]), signal.SIGKILL)
    deadline = time.monotonic() + 5
    for path in root.glob("**/tasks/*/supervisor.json"):
        supervisor = read_json(path) or {}
        pid = int(supervisor.get("pid", 0))
        while pid and time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] != 0:
                    break
            except ChildProcessError:  # not our child: it only has to be gone
                if prove(supervisor) is not Proof.ALIVE:
                    break
            time.sleep(0.01)
