"""A long task's world for the fault suites: a fault cluster (``truerun dev`` + the reconciler
+ a reference agent), the effect fixture as a process of its own, the public LongTaskService,
and the declared steps the reference agent's step driver runs (commands of the effect
client, gates the test opens). Kill points are reached by observation only.

``crash()`` is the seed's "SIGKILL the service at the fault point": the attempt's process
(the step driver and its command, one process group, as the agent's durable handle names
it) and the truerun server die together; the server is started again on the same data.
The agent's supervisor lives on and reports the command's death as evidence, as on a real
machine whose agent process crashed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tests.faults.harness import Cluster, Service
from tests.faults.longtask_api import LongTasks
from tests.support.effect_client import control, effects_of, stats
from tests.support.effect_fixture_process import FixtureProcess, fixture_process
from truerun_runtime.agent.procfs import Proof, prove, read_json

REPO = Path(__file__).resolve().parents[2]
CLIENT = f"PYTHONPATH={REPO} {sys.executable} -m tests.support.effect_client"
TOOL_TIMEOUT_S = 60.0  # the effect client's own timeout: every kill must land before it
RETRYABLE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,  # a stale etag: the task moved on since it was read
    grpc.StatusCode.FAILED_PRECONDITION,  # the question was answered or expired meanwhile
)
CLASS = {
    "pure": "SIDE_EFFECT_CLASS_PURE",
    "idempotent": "SIDE_EFFECT_CLASS_IDEMPOTENT",
    "queryable": "SIDE_EFFECT_CLASS_QUERYABLE",
    "non_idempotent": "SIDE_EFFECT_CLASS_NON_IDEMPOTENT",
}


@dataclass
class World:
    cluster: Cluster
    agents: list[Service]
    fixture: FixtureProcess
    tasks: LongTasks
    tmp: Path

    @property
    def agent(self) -> Service:
        return self.agents[0]

    # -- declared steps ------------------------------------------------------------------------

    def gate(self, name: str) -> Path:
        return self.cluster.gate(name)

    def post(self, key: str, *, idempotent: bool = False) -> str:
        flags = " --idempotent" if idempotent else ""
        return (
            f"{CLIENT} post --url {self.fixture.url} --key {key} --target chat:{key}"
            f" --timeout-s {TOOL_TIMEOUT_S:.0f}{flags}"
        )

    def effect_step(
        self,
        step_id: str,
        side_effect: str,
        key: str,
        *,
        before: str = "",
        approval: str = "",
    ) -> dict[str, Any]:
        """A step whose command posts one effect of ``key`` (after ``before``, if given),
        printing the receipt the driver parses; queryable steps probe the fixture by key."""
        run = self.post(key, idempotent=side_effect == "idempotent")
        action: dict[str, Any] = {"run": f"{before}; {run}" if before else run}
        action |= {"receipt": "json", "target": f"chat:{key}"}
        if approval:
            action["approval"] = approval
        step: dict[str, Any] = {
            "stepId": step_id,
            "title": f"post {key}",
            "sideEffect": CLASS[side_effect],
            "action": action,
        }
        if side_effect in ("idempotent", "queryable"):
            step["idempotencyKey"] = key
        if side_effect == "queryable":
            step["probe"] = {"run": f"{CLIENT} probe --url {self.fixture.url} --key {key}"}
        return step

    def file_step(self, step_id: str, path: Path, then: str = "") -> dict[str, Any]:
        """A pure step writing ``path`` (then running ``then``): a file-shaped step."""
        run = f"echo '{step_id}' > '{path}'" + (f"; {then}" if then else "")
        action = {"run": run, "writes": str(path)}
        return {
            "stepId": step_id,
            "title": f"write {path.name}",
            "sideEffect": CLASS["pure"],
            "action": action,
        }

    @staticmethod
    def file_exists(criterion_id: str, path: Path) -> dict[str, Any]:
        return {
            "criterionId": criterion_id,
            "text": f"{path.name} exists",
            "checkerKind": "file_exists",
            "checker": {"path": str(path)},
        }

    @staticmethod
    def step_done(criterion_id: str, step_id: str) -> dict[str, Any]:
        return {
            "criterionId": criterion_id,
            "text": f"step {step_id} completed with evidence",
            "checkerKind": "step_completed",
            "checker": {"step_id": step_id},
        }

    def create(
        self,
        task_id: str,
        steps: list[dict[str, Any]],
        criteria: list[dict[str, Any]],
        start: bool = True,
    ) -> str:
        draft = {
            "longTaskId": task_id,
            "ownerId": "faults",
            "goal": f"fault scenario {task_id}",
            "steps": steps,
            "criteria": criteria,
        }
        return self.tasks.create(draft, start=start).long_task_id

    # -- the outside world ---------------------------------------------------------------------

    def withhold(self, *keys: str) -> None:
        """The fixture records these keys' effects and holds their answers back (every
        request for them, until ``release``)."""
        control(self.fixture.url, withhold_keys=list(keys))

    def release(self) -> None:
        """Stop holding anything back (and free the holds open now)."""
        control(self.fixture.url, withhold_keys=[])
        control(self.fixture.url, release=True)

    def effects(self, key: str) -> int:
        return effects_of(self.fixture.url, key)

    def duplicates(self, key: str) -> int:
        per_key = stats(self.fixture.url).get("keys", {}).get(key, {})
        return int(per_key.get("duplicates", 0))

    # -- faults --------------------------------------------------------------------------------

    def command_groups(self) -> list[int]:
        """The process groups of the agents' live commands (from their durable handles,
        proven against /proc: a recorded pid alone may name a stranger by now)."""
        groups = []
        for agent in self.agents:
            assert agent.state_dir is not None
            for path in (agent.state_dir / "tasks").glob("*/handle.json"):
                record = read_json(path) or {}
                if prove(record) is Proof.ALIVE:
                    groups.append(int(record["pgid"]))
        return groups

    def kill_attempts(self) -> int:
        """SIGKILL every running attempt's process (the runtime crashed; the agents'
        supervisors live on and report it); how many."""
        groups = self.command_groups()
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        return len(groups)

    def call(self, action: Callable[..., object], *args: object) -> None:
        """``action(*args)``, where a process the chaos killed may answer UNAVAILABLE, or a
        task may have moved on meanwhile (a stale etag): the next look tries again."""
        try:
            action(*args)
        except grpc.RpcError as error:
            if error.code() not in RETRYABLE:
                raise

    def crash(self, attempt_alive: bool = True) -> float:
        """SIGKILL the attempt's process and the server at once; restart the server. Returns
        when the kill landed (time.monotonic()). ``attempt_alive=False``: a point where no
        attempt runs (a question asked ends its attempt): the server alone dies."""
        groups = self.command_groups()
        assert bool(groups) == attempt_alive, f"live commands {groups}: the point was not reached"
        server = self.cluster.server
        assert server is not None
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        self.cluster.kill(server)
        landed = time.monotonic()
        self.cluster.restart(server)
        return landed


@contextlib.contextmanager
def world(
    cluster: Cluster, tmp: Path, agents: int = 1, limit: int = 2, **fixture_options: Any
) -> Iterator[World]:
    started = [cluster.start_agent(f"lt{i}", limit=limit) for i in range(agents)]
    with fixture_process(tmp / "effects.jsonl", **fixture_options) as fixture:
        yield World(cluster, started, fixture, LongTasks(cluster.api.channel), tmp)
