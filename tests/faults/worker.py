"""The whole worker as one: the agent, its supervisors and its commands, signalled together
(a container that freezes or dies, not only its agent process)."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from tests.faults.harness import Cluster, Service
from truerun_runtime.agent.procfs import Proof, prove, read_json


def signal_tasks(agent: Service, signum: int) -> int:
    """Send ``signum`` to every command and supervisor of an agent that /proc proves alive;
    how many groups were signalled. (SIGSTOP freezes the whole worker, not only the agent.)"""
    assert agent.state_dir is not None
    sent = 0
    for name in ("handle.json", "supervisor.json"):
        for path in (agent.state_dir / "tasks").glob(f"*/{name}"):
            record = read_json(path) or {}
            if prove(record) is Proof.ALIVE:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(record["pgid"]), signum)
                    sent += 1
    return sent


def freeze_worker(cluster: Cluster, agent: Service) -> None:
    cluster.freeze(agent)
    signal_tasks(agent, signal.SIGSTOP)


def kill_worker(cluster: Cluster, agent: Service) -> float:
    """A container death: freeze the agent, its supervisors and its commands (so none of it
    acts between the first kill and the last), then SIGKILL all of them; the wall time of
    the kill. ``cluster.spans()`` ends the killed commands' spans there."""
    freeze_worker(cluster, agent)
    killed_at = time.time()
    cluster.kill(agent)
    cluster.kill_commands(agent)
    return killed_at


def thaw_worker(cluster: Cluster, agent: Service) -> None:
    signal_tasks(agent, signal.SIGCONT)
    cluster.thaw(agent)
