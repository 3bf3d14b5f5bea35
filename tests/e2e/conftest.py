"""``live``: a real ``truerun dev`` (SQLite or PostgreSQL) and real ``truerun agent`` processes
on loopback, with a sync gRPC client, bounded polling helpers and a teardown that leaves no
process behind."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from truerun.v1 import (
    capacity_service_pb2,
    capacity_service_pb2_grpc,
    common_pb2,
    run_service_pb2,
    run_service_pb2_grpc,
)

from tests.support.auth import sync_channel
from tests.support.output import read_output
from tests.support.processes import AgentProcess, DevServer, Processes

OWNER = "e2e-owner"
POLL_S = 0.05
T = TypeVar("T")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The PostgreSQL variant of ``live`` needs a real PostgreSQL: mark it ``postgres``."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("live") == "postgres":
            item.add_marker(pytest.mark.postgres)


def display(run: common_pb2.Run) -> str:
    """``DISPLAY_STATE_RUNNING`` -> ``running``."""
    name = common_pb2.DisplayState.Name(run.display_state)
    return str(name).removeprefix("DISPLAY_STATE_").lower()


def payload(event: common_pb2.RunEvent) -> dict[str, Any]:
    return json_format.MessageToDict(event.payload)


def eventually(predicate: Callable[[], T | None], timeout: float, what: str = "") -> T:
    """Poll ``predicate`` every ~50 ms until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(POLL_S)


@dataclass(frozen=True)
class Sample:
    """One GetRun answer: what was displayed, and up to which event it was committed."""

    at: float
    display: str
    event_sequence: int


@dataclass
class Live:
    backend: str
    procs: Processes
    server: DevServer
    data_dir: Path
    state_dir: Path
    instance_id: str
    channel: grpc.Channel
    runs: run_service_pb2_grpc.RunServiceStub
    capacity: capacity_service_pb2_grpc.CapacityServiceStub
    server_env: dict[str, str] = field(default_factory=dict)
    agent: AgentProcess | None = None
    history: dict[str, list[Sample]] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def api_token(self) -> str:
        return self.server.api_token()

    def start_agent(self, limit: int = 1) -> AgentProcess:
        """(Re)start the reference agent on the same state dir; returns once it is connected."""
        if self.agent is not None and self.agent.alive():
            raise AssertionError("the previous agent still runs; kill or stop it first")
        self.agent = self.procs.agent(
            self.address,
            self.server.token(),
            OWNER,
            self.state_dir,
            limit=limit,
            extra_args=("--instance-id", self.instance_id),
        )
        return self.agent

    def restart_server(self) -> DevServer:
        """Start ``truerun dev`` again on the same address, data dir and database (after the
        test killed or stopped it); the client channel and the agent reconnect by themselves."""
        if self.server.alive():
            raise AssertionError("the previous server still runs; kill or stop it first")
        self.server = self.procs.dev(self.data_dir, self.server_env, self.server.address)
        return self.server

    # -- the API -------------------------------------------------------------------------------

    def submit(
        self, command: str, task: str = "job", *, run_now: bool = False, max_attempts: int = 1
    ) -> str:
        spec = struct_pb2.Struct()
        spec.update({"command": command})
        response = self.runs.CreateRun(
            run_service_pb2.CreateRunRequest(
                project_id="e2e",
                owner_id=OWNER,
                task_id=task,
                spec=spec,
                run_now=run_now,
                max_attempts=max_attempts,
            ),
            timeout=10,
        )
        return str(response.run.id)

    def get(self, run_id: str) -> common_pb2.Run:
        """GetRun, remembering what it displayed (for ordering checks afterwards)."""
        run = self.runs.GetRun(run_service_pb2.GetRunRequest(id=run_id), timeout=10)
        sample = Sample(time.monotonic(), display(run), run.event_sequence)
        self.history.setdefault(run_id, []).append(sample)
        return run

    def output(self, run_id: str) -> str:
        return read_output(self.runs, run_id)

    def events(self, run_id: str) -> list[common_pb2.RunEvent]:
        events: list[common_pb2.RunEvent] = []
        token = ""
        while True:
            page = self.runs.ListRunEvents(
                run_service_pb2.ListRunEventsRequest(
                    run_id=run_id, page_token=token, page_size=500
                ),
                timeout=10,
            )
            events.extend(page.events)
            token = page.next_page_token
            if not token:
                return events

    def occupancy(self) -> capacity_service_pb2.Occupancy:
        return self.capacity.GetOccupancy(
            capacity_service_pb2.GetOccupancyRequest(
                owner_id=OWNER, runtime_instance_id=self.instance_id
            ),
            timeout=10,
        )

    def wait_for(
        self,
        run_id: str,
        predicate: Callable[[common_pb2.Run], bool],
        timeout: float = 15.0,
        what: str = "",
    ) -> common_pb2.Run:
        """Poll GetRun every ~50 ms until ``predicate(run)`` holds (bounded); the run."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if predicate(run):
                return run
            if time.monotonic() >= deadline:
                seen = [s.display for s in self.history.get(run_id, [])]
                raise AssertionError(
                    f"run {run_id}: timed out after {timeout}s waiting for {what or predicate}; "
                    f"now {display(run)} ({run.display_reason}); displayed {_squash(seen)}"
                )
            time.sleep(POLL_S)

    def wait_display(self, run_id: str, *states: str, timeout: float = 15.0) -> common_pb2.Run:
        return self.wait_for(run_id, lambda r: display(r) in states, timeout, f"one of {states}")

    def displayed(self, run_id: str) -> list[str]:
        """The display states seen so far, consecutive repeats squashed."""
        return _squash([s.display for s in self.history.get(run_id, [])])


def _squash(states: list[str]) -> list[str]:
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def _short_dir(tmp_path: Path) -> Path:
    """A state dir whose unix socket path stays well under 108 bytes."""
    candidate = tmp_path / "agent"
    if len(str(candidate / "agent.sock")) < 90:
        return candidate
    return Path(tempfile.mkdtemp(prefix="tre-"))


@pytest.fixture(params=["sqlite", "postgres"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live]:
    yield from _live(request, tmp_path, {})


@pytest.fixture(params=["sqlite", "postgres"])
def live_short_lease(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live]:
    """A server whose claim leases last 3 s (heartbeats every second renew them)."""
    yield from _live(request, tmp_path, {"TRUERUN_LEASE_TTL_MS": "3000"})


def _live(
    request: pytest.FixtureRequest, tmp_path: Path, server_env: dict[str, str]
) -> Iterator[Live]:
    env: dict[str, str] = dict(server_env)
    if request.param == "postgres":
        env["TRUERUN_DATABASE_URL"] = str(request.getfixturevalue("pg_url"))
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs)
    state_dir = _short_dir(tmp_path)
    raw: grpc.Channel | None = None
    try:
        server = procs.dev(tmp_path / "data", env)
        raw, channel = sync_channel(server.address, server.api_token())
        yield Live(
            backend=str(request.param),
            procs=procs,
            server=server,
            data_dir=server.data_dir,
            state_dir=state_dir,
            instance_id=f"e2e-{request.param}",
            channel=channel,
            runs=run_service_pb2_grpc.RunServiceStub(channel),
            capacity=capacity_service_pb2_grpc.CapacityServiceStub(channel),
            server_env=env,
        )
    finally:
        if raw is not None:
            raw.close()
        procs.close()
        leftovers = procs.leftovers()
        if not str(state_dir).startswith(str(tmp_path)):
            shutil.rmtree(state_dir, ignore_errors=True)
    assert not leftovers, f"processes left behind: {leftovers}"
