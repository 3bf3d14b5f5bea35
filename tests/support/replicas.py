"""A production-shaped deployment on loopback: `truerun coordinator`, `truerun capacity` and
`truerun reconciler` replicas as real processes over one PostgreSQL database and Redis, and
reference agents (`truerun agent`) that know every coordinator address.

Every replica keeps its port across a restart (the others and the agents hold a fixed list
of addresses, as a Kubernetes Service would). Agents get the coordinator list in their own
order (`ipv4:a,b,c`, gRPC pick_first): each sticks to one and moves to the next when it goes
away. Clients round-robin over all coordinators.
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tests.support.auth import SERVICE_TOKEN, TEST_TOKENS_SPEC, aio_channel
from tests.support.processes import TRUERUN, AgentProcess, Managed, Processes, _base_env

LISTENING = re.compile(r"^grpc listening on (\S+:\d+)$", re.MULTILINE)
RECONCILER_READY = re.compile(r"^reconciler running$", re.MULTILINE)
TOKEN = "multi-replica-runtime-token"


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports. All are held until all are picked: one at a
    time, the kernel may hand out a port it just gave back, and two replicas given one port
    cannot both start (a CI run, before servers bound without SO_REUSEPORT, saw
    ConfigureAgent reach a coordinator on the capacity service's port)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def ipv4_target(ports: list[int]) -> str:
    """One gRPC target naming every port (``ipv4:127.0.0.1:a,127.0.0.1:b``)."""
    return "ipv4:" + ",".join(f"127.0.0.1:{port}" for port in ports)


@dataclass
class Replica:
    kind: str
    index: int
    port: int
    proc: Managed
    restarts: int = 0


@dataclass
class Deployment:
    tmp: Path
    database_url: str
    redis_url: str
    owner: str
    settings: Mapping[str, str] = field(default_factory=dict)
    procs: Processes = field(init=False)
    replicas: dict[tuple[str, int], Replica] = field(default_factory=dict)
    agents: list[AgentProcess] = field(default_factory=list)
    capacity_ports: list[int] = field(default_factory=list)
    coordinator_ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        (self.tmp / "logs").mkdir(parents=True, exist_ok=True)
        self.procs = Processes(self.tmp / "logs")

    # -- environment -------------------------------------------------------------------------

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        values = {
            "TRUERUN_DATABASE_URL": self.database_url,
            "TRUERUN_REDIS_URL": self.redis_url,
            "TRUERUN_RUNTIME_TOKENS": f"{self.owner}:{TOKEN}",
            "TRUERUN_API_TOKENS": TEST_TOKENS_SPEC,
            "TRUERUN_SERVICE_TOKEN": SERVICE_TOKEN,
            "TRUERUN_CAPACITY_ADDR": ipv4_target(self.capacity_ports),
            "TRUERUN_METRICS_ADDR": "127.0.0.1:0",
            "TRUERUN_GRACE_SECONDS": "10",
            **self.settings,
            **(extra or {}),
        }
        return _base_env(self.procs.marker, values)

    def migrate(self) -> None:
        """`truerun migrate`, once per release, before any replica starts."""
        subprocess.run(
            [TRUERUN, "migrate", "--database-url", self.database_url],
            env=self.env(),
            check=True,
            capture_output=True,
            timeout=120,
        )

    # -- services ----------------------------------------------------------------------------

    def start(self, coordinators: int, capacities: int, reconcilers: int) -> None:
        ports = free_ports(capacities + coordinators)
        self.capacity_ports, self.coordinator_ports = ports[:capacities], ports[capacities:]
        for i in range(capacities):
            self.launch("capacity", i)
        for i in range(coordinators):
            self.launch("coordinator", i)
        for i in range(reconcilers):
            self.launch("reconciler", i)

    def launch(
        self, kind: str, index: int, extra: Mapping[str, str] | None = None, wait: bool = True
    ) -> Replica:
        """Start (or restart, on the same port) one replica and (``wait``) wait until it
        serves."""
        if kind == "reconciler":
            port = 0
            argv = [TRUERUN, "reconciler", "--database-url", self.database_url]
            argv += ["--grpc-addr", "127.0.0.1:0"]
        else:
            ports = self.capacity_ports if kind == "capacity" else self.coordinator_ports
            port = ports[index]
            argv = [TRUERUN, kind, "--grpc-addr", f"127.0.0.1:{port}"]
        previous = self.replicas.get((kind, index))
        restarts = previous.restarts + 1 if previous else 0
        log = self.tmp / "logs" / f"{kind}-{index}-{restarts}.log"
        proc = Managed(argv, self.env(extra), log)
        self.procs.started.append(proc)
        if wait:
            proc.wait_for_log(RECONCILER_READY if kind == "reconciler" else LISTENING, 60)
        replica = Replica(kind, index, port, proc, restarts)
        self.replicas[(kind, index)] = replica
        return replica

    def replica(self, kind: str, index: int) -> Replica:
        return self.replicas[(kind, index)]

    def agent(self, index: int, limit: int, order: list[int] | None = None) -> AgentProcess:
        """A reference agent whose coordinator list starts at ``order`` (default: rotated by
        its index, so agents spread over the coordinators)."""
        ports = self.coordinator_ports
        if order is None:
            order = [(index + k) % len(ports) for k in range(len(ports))]
        state_dir = self.tmp / f"agent-{index}"
        self.procs.state_dirs.append(state_dir)
        argv = [
            TRUERUN,
            "agent",
            "--server",
            ipv4_target([ports[k] for k in order]),
            "--owner",
            self.owner,
            "--instance-id",
            f"rt-{index}",
            "--limit",
            str(limit),
            "--state-dir",
            str(state_dir),
            "--keepalive-ms",
            "5000",
            "--log-level",
            "INFO",
        ]
        env = _base_env(self.procs.marker, {"TRUERUN_TOKEN": TOKEN})
        agent = AgentProcess(argv, env, self.tmp / "logs" / f"agent-{index}.log")
        self.procs.started.append(agent)
        self.agents.append(agent)
        agent.wait_ready(60)
        return agent

    def client_channel(self) -> grpc.aio.Channel:
        """An asyncio channel that round-robins over every coordinator."""
        return aio_channel(
            ipv4_target(self.coordinator_ports),
            options=[("grpc.lb_policy_name", "round_robin")],
        )

    def logs(self) -> str:
        """Where to look when a test fails."""
        return str(self.tmp / "logs")

    def close(self) -> None:
        self.procs.close()
