"""The fault harness: the real control plane and reference agents as separate processes on
loopback, against a fresh PostgreSQL database (or SQLite) and a Redis database of the test's
own, with a fault proxy in front of PostgreSQL, Redis and every gRPC port.

A test drives it synchronously::

    with Cluster(tmp_path, lease_ttl_ms=2500) as cluster:
        agent = cluster.start_agent("a1", limit=1)
        run_id = cluster.submit("job", command=cluster.side_effect("sleep 5"))
        cluster.wait_for(run_id, "running")
        cluster.kill(agent)          # SIGKILL; the command's supervisor lives on
        cluster.restart(agent)       # same argv, same state dir
        cluster.wait_for(run_id, TERMINAL, 30)

Points are detected through the public API (GetRun, ListRunEvents, GetOccupancy) only: the
services carry no fault hooks. Every process logs to ``<tmp>/logs``; on failure the seed and
that path are printed (see conftest.py). Teardown kills every process the cluster started
(and every command those left running), drops the database and flushes the Redis db.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format, struct_pb2
from sqlalchemy.engine import make_url
from truerun.v1 import (
    capacity_service_pb2,
    capacity_service_pb2_grpc,
    common_pb2,
    run_service_pb2,
    run_service_pb2_grpc,
)

from tests.faults.proxy import FaultProxy
from tests.support.auth import sync_channel
from tests.support.databases import create_pg_database, drop_pg_database
from tests.support.output import read_output
from tests.support.processes import (
    LISTENING,
    TRUERUN,
    Managed,
    Processes,
    _base_env,
    kill_tasks,
    live_process,
)

TERMINAL = ("succeeded", "failed", "cancelled", "timed_out")
OWNER = "faults"
PROJECT = "faults"
OPERATOR = common_pb2.Actor(type=common_pb2.ACTOR_TYPE_OPERATOR, id="ops@example")
POLL_S = 0.05
CALL_TIMEOUT_S = 10.0
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
PG_HOST, PG_PORT = "127.0.0.1", 5432
# Redis databases 1..14 are handed out to fault clusters, one each, under a file lock, so
# concurrent tests never flush each other's observations (15 belongs to other tests).
REDIS_DBS = range(1, 13)  # 13-15: tests/support/databases.py redis_test_url()
REDIS_LOCK_DIR = Path("/tmp/truerun-faults-redis")
RECONCILER_READY = re.compile(r"^reconciler running$", re.MULTILINE)
T = TypeVar("T")


def display(run: common_pb2.Run) -> str:
    """``DISPLAY_STATE_RUNNING`` -> ``running``."""
    return (
        str(common_pb2.DisplayState.Name(run.display_state)).removeprefix("DISPLAY_STATE_").lower()
    )


def payload(event: common_pb2.RunEvent) -> dict[str, Any]:
    return json_format.MessageToDict(event.payload)


def types(events: Iterable[common_pb2.RunEvent]) -> list[str]:
    return [e.type for e in events]


def gapless(events: list[common_pb2.RunEvent]) -> bool:
    """A run's event sequence numbers are 1..n without a gap or a repeat."""
    return [e.sequence for e in events] == list(range(1, len(events) + 1))


# -- side effects outside truerun -----------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One real process start of a run's command, read from the side-effect log."""

    run_id: str
    attempt_id: str
    pid: int
    start: float
    end: float | None = None  # None: no end line (killed, or still running)
    exit_code: int | None = None


def side_effect_command(log: Path, body: str) -> str:
    """A shell command that appends ``start <run> <attempt> <pid> <time>`` to ``log``, runs
    ``body`` and appends ``end <run> <attempt> <pid> <time> <exit>``. A SIGTERM (a cancel
    or a self-fence) still writes the end line (exit 143); only a SIGKILL leaves it open.
    The body runs in the background with ``wait`` so the TERM trap fires at once."""
    ids = '"$TRUERUN_RUN_ID" "$TRUERUN_ATTEMPT_ID" $$'
    end = f"echo end {ids} $(date +%s.%N) \"$rc\" >> '{log}'"
    return (
        f"echo start {ids} $(date +%s.%N) >> '{log}'; "
        f"trap 'rc=143; {end}; exit 143' TERM; "
        f"( {body} ) & wait $!; rc=$?; {end}; exit $rc"
    )


def parse_side_effects(log: Path) -> list[Span]:
    """Every start in the log, in start order, with its end if one was written."""
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    starts: dict[tuple[str, str, int], float] = {}
    ends: dict[tuple[str, str, int], tuple[float, int]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) < 5:
            continue  # a torn line of a killed writer
        key = (parts[1], parts[2], int(parts[3]))
        if parts[0] == "start":
            starts[key] = float(parts[4])
        elif parts[0] == "end" and len(parts) >= 6:
            ends[key] = (float(parts[4]), int(parts[5]))
    spans = []
    for key, start in starts.items():
        end = ends.get(key)
        spans.append(
            Span(key[0], key[1], key[2], start, end[0] if end else None, end[1] if end else None)
        )
    return sorted(spans, key=lambda s: s.start)


def starts_per_attempt(spans: Iterable[Span]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for span in spans:
        counts[span.attempt_id] = counts.get(span.attempt_id, 0) + 1
    return counts


def overlaps(spans: list[Span], key: Callable[[Span], str] = lambda s: s.run_id) -> list[str]:
    """Pairs of spans with the same key (default: the same run) that ran at the same time;
    a span without an end counts as never ending."""
    found = []
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if key(a) != key(b):
                continue
            a_end = a.end if a.end is not None else float("inf")
            b_end = b.end if b.end is not None else float("inf")
            if a.start < b_end and b.start < a_end:
                found.append(f"{a} overlaps {b}")
    return found


# -- processes --------------------------------------------------------------------------------


@dataclass(eq=False)
class Service:
    """A process of the cluster; ``restart`` swaps ``proc`` in place (same handle)."""

    name: str
    kind: str  # "server", "reconciler" or "agent"
    proc: Managed
    launch: Callable[[bool], Managed]  # True: wait until it is ready
    instance_id: str = ""
    state_dir: Path | None = None
    proxy: FaultProxy | None = None  # an agent's own proxy in front of the gRPC port
    frozen: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.alive()

    def log(self) -> str:
        return self.proc.log()

    @property
    def log_path(self) -> Path:
        return self.proc.log_path


@dataclass
class Api:
    """The public gRPC API with a deadline on every call (directly, or through a proxy)."""

    address: str
    timeout_s: float = CALL_TIMEOUT_S
    capacity_address: str = ""  # where CapacityService is served, when not at ``address``
    token: str = ""  # the API token every call carries (the cluster's operator token)
    #: truerun's own service identity: the only caller of ReportObservation and Claim
    #: (a test playing a dispatcher, like a ghost that claims and never starts).
    service_token: str = ""
    channel: grpc.Channel = field(init=False)
    runs: run_service_pb2_grpc.RunServiceStub = field(init=False)
    capacity: capacity_service_pb2_grpc.CapacityServiceStub = field(init=False)
    service: capacity_service_pb2_grpc.CapacityServiceStub = field(init=False)

    def __post_init__(self) -> None:
        self._raw, self.channel = sync_channel(self.address, self.token)
        target = self.capacity_address or self.address
        self._capacity_raw, capacity_channel = sync_channel(target, self.token)
        self._service_raw, service_channel = sync_channel(target, self.service_token)
        self.runs = run_service_pb2_grpc.RunServiceStub(self.channel)
        self.capacity = capacity_service_pb2_grpc.CapacityServiceStub(capacity_channel)
        self.service = capacity_service_pb2_grpc.CapacityServiceStub(service_channel)

    def close(self) -> None:
        for raw in (self._raw, self._capacity_raw, self._service_raw):
            raw.close()

    def submit(
        self,
        task_id: str,
        command: str | list[str],
        *,
        idempotent: bool = False,
        max_attempts: int = 1,
        spec: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> str:
        body = struct_pb2.Struct()
        body.update(dict(spec or {}))
        if isinstance(command, str):
            body.update({"command": command})
        else:
            body.update({"argv": list(command)})
        request = run_service_pb2.CreateRunRequest(
            project_id=fields.pop("project_id", PROJECT),
            owner_id=fields.pop("owner_id", OWNER),
            task_id=task_id,
            spec=body,
            idempotent=idempotent,
            max_attempts=max_attempts,
            **fields,
        )
        return str(self.runs.CreateRun(request, timeout=self.timeout_s).run.id)

    def get(self, run_id: str) -> common_pb2.Run:
        return self.runs.GetRun(run_service_pb2.GetRunRequest(id=run_id), timeout=self.timeout_s)

    def output(self, run_id: str) -> str:
        return read_output(self.runs, run_id, timeout=self.timeout_s)

    def events(self, run_id: str) -> list[common_pb2.RunEvent]:
        events: list[common_pb2.RunEvent] = []
        token = ""
        while True:
            page = self.runs.ListRunEvents(
                run_service_pb2.ListRunEventsRequest(
                    run_id=run_id, page_token=token, page_size=500
                ),
                timeout=self.timeout_s,
            )
            events.extend(page.events)
            token = page.next_page_token
            if not token:
                return events

    def cancel(self, run_id: str, reason: str = "faults") -> run_service_pb2.CancelRunResponse:
        return self.runs.CancelRun(
            run_service_pb2.CancelRunRequest(id=run_id, reason=reason), timeout=self.timeout_s
        )

    def resolve(
        self, run_id: str, resolution: run_service_pb2.Resolution.ValueType, reason: str
    ) -> common_pb2.Run:
        """An operator's audited ResolveRun (the cluster's operator token, named
        ``ops@example``)."""
        request = run_service_pb2.ResolveRunRequest(
            id=run_id, actor=OPERATOR, reason=reason, resolution=resolution
        )
        return self.runs.ResolveRun(request, timeout=self.timeout_s)

    def occupancy(self, instance_id: str, owner_id: str = OWNER) -> capacity_service_pb2.Occupancy:
        return self.capacity.GetOccupancy(
            capacity_service_pb2.GetOccupancyRequest(
                owner_id=owner_id, runtime_instance_id=instance_id
            ),
            timeout=self.timeout_s,
        )


class Cluster:
    """See the module docstring. ``settings`` become TRUERUN_* variables of the services
    (``lease_ttl_ms=2500`` -> ``TRUERUN_LEASE_TTL_MS=2500``)."""

    def __init__(
        self,
        tmp_dir: Path,
        database: str = "postgres",
        redis: bool = True,
        *,
        seed: int | None = None,
        reconciler: bool = True,
        topology: str = "dev",
        **settings: object,
    ) -> None:
        """``topology``: "dev" (``truerun dev``: coordinator and capacity in one process) or
        "split" (``truerun capacity`` and ``truerun coordinator`` as processes of their own,
        ``cluster.capacity`` the former; needs Redis)."""
        if database not in ("postgres", "sqlite"):
            raise ValueError(f"database must be postgres or sqlite, not {database!r}")
        if topology not in ("dev", "split") or (topology == "split" and not redis):
            raise ValueError(f"topology must be dev, or split with Redis, not {topology!r}")
        self.topology = topology
        self.capacity: Service | None = None
        self._capacity_address = ""
        self._runtime_token = uuid.uuid4().hex
        #: every service's API token: all projects, operator, named like OPERATOR's actor
        self.api_token = uuid.uuid4().hex
        self.service_token = uuid.uuid4().hex  # truerun's own identity (the capacity service)
        self.tmp_dir = tmp_dir
        self.database = database
        self.use_redis = redis
        self.use_reconciler = reconciler
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**32)
        self.random = random.Random(self.seed)
        self.settings = {f"TRUERUN_{k.upper()}": str(v) for k, v in settings.items()}
        self.log_dir = tmp_dir / "logs"
        self.data_dir = tmp_dir / "data"
        self.side_effect_log = tmp_dir / "side-effects.log"
        self.procs = Processes(self.log_dir)
        self.services: list[Service] = []
        self.proxies: list[FaultProxy] = []
        self.pg_url = ""  # direct, for the test's own queries
        self.redis_db: int | None = None
        self.redis_url = ""  # direct
        self._redis_lock: int | None = None
        self.pg_proxy: FaultProxy | None = None
        self.redis_proxy: FaultProxy | None = None
        self.grpc_proxy: FaultProxy | None = None
        self.server: Service | None = None
        self.reconciler: Service | None = None
        self._server_address = "127.0.0.1:0"
        self._api: Api | None = None
        self._apis: list[Api] = []
        self._agents = 0
        self._command_kills: list[float] = []
        self.history: dict[str, list[tuple[float, str, int]]] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> str:
        """What a failing test prints: the seed and where the process logs are."""
        return f"seed={self.seed} logs={self.log_dir}"

    def start(self) -> Cluster:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(self.settings)
        env.setdefault("TRUERUN_GRACE_SECONDS", "1")
        env.setdefault("TRUERUN_CANCEL_GRACE_MS", "1000")
        env["TRUERUN_METRICS_ADDR"] = "127.0.0.1:0"
        env["TRUERUN_API_TOKENS"] = (
            f"{OPERATOR.id}={self.api_token}:*:operator;coordinator={self.service_token}:*:service"
        )
        env["TRUERUN_SERVICE_TOKEN"] = self.service_token
        if self.database == "postgres":
            self.pg_url = asyncio.run(create_pg_database())
            self.pg_proxy = self._proxy((PG_HOST, PG_PORT), "pg")
            url = make_url(self.pg_url).set(host="127.0.0.1", port=self.pg_proxy.port)
            env["TRUERUN_DATABASE_URL"] = url.render_as_string(hide_password=False)
        if self.use_redis:
            self.redis_db = self._take_redis_db()
            self.redis_url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{self.redis_db}"
            self.flush_redis()
            self.redis_proxy = self._proxy((REDIS_HOST, REDIS_PORT), "redis")
            env["TRUERUN_REDIS_URL"] = f"redis://{self.redis_proxy.address}/{self.redis_db}"
        self.service_env = env
        if self.topology == "split":
            self._start_split()
        else:
            self.server = self._start_server()
        host, port = self._server_address.rsplit(":", 1)
        self.grpc_proxy = self._proxy((host, int(port)), "grpc")
        self._api = Api(
            self._server_address,
            capacity_address=self._capacity_address,
            token=self.api_token,
            service_token=self.service_token,
        )
        self._apis.append(self._api)
        if self.use_reconciler:
            self.reconciler = self._start_reconciler()
        return self

    def close(self) -> None:
        """Kill everything, then drop the database and flush the Redis db (never raises
        before everything was tried)."""
        for service in self.services:
            if service.frozen:
                self._signal(service, signal.SIGCONT)
        for api in self._apis:
            api.close()
        self.procs.close()
        for proxy in self.proxies:
            proxy.close()
        if self.pg_url:
            with contextlib.suppress(Exception):
                asyncio.run(drop_pg_database(self.pg_url))
        if self.redis_db is not None:
            with contextlib.suppress(Exception):
                self.flush_redis()
        if self._redis_lock is not None:
            os.close(self._redis_lock)
            self._redis_lock = None

    def leftovers(self) -> list[int]:
        return self.procs.leftovers()

    # -- processes -----------------------------------------------------------------------------

    def _proxy(self, upstream: tuple[str, int], name: str) -> FaultProxy:
        proxy = FaultProxy(upstream, name)
        self.proxies.append(proxy)  # closed with the cluster even if it fails to start
        return proxy.start()

    def _start_server(self) -> Service:
        def launch(ready: bool = True) -> Managed:
            server = self.procs.dev(self.data_dir, self.service_env, self._server_address)
            self._server_address = server.address
            return server

        service = Service("server", "server", launch(True), launch)
        self.services.append(service)
        return service

    def _start_split(self) -> None:
        """``truerun migrate``, then ``truerun capacity`` and ``truerun coordinator``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **self.service_env,
            "TRUERUN_DATA_DIR": str(self.data_dir),
            "TRUERUN_RUNTIME_TOKENS": f"{OWNER}:{self._runtime_token}",
        }
        subprocess.run(
            [TRUERUN, "migrate"],
            env=_base_env(self.procs.marker, env),
            capture_output=True,
            timeout=120,
            check=True,
        )
        self.service_env = env
        self.capacity = self._start_grpc_service("capacity", env)
        env["TRUERUN_CAPACITY_ADDR"] = self._capacity_address
        self.server = self._start_grpc_service("coordinator", env)

    def _start_grpc_service(self, kind: str, env: dict[str, str]) -> Service:
        """A ``truerun capacity|coordinator`` process; restarts bind the same port."""
        address = "127.0.0.1:0"

        def launch(ready: bool = True) -> Managed:
            nonlocal address
            argv = [TRUERUN, kind, "--grpc-addr", address]
            proc = Managed(argv, _base_env(self.procs.marker, env), self.procs._log(kind))
            self.procs.started.append(proc)
            address = proc.wait_for_log(LISTENING, 60).group(1)
            if kind == "capacity":
                self._capacity_address = address
            else:
                self._server_address = address
            return proc

        service = Service(kind, "server" if kind == "coordinator" else kind, launch(True), launch)
        self.services.append(service)
        return service

    def _start_reconciler(self) -> Service:
        argv = [TRUERUN, "reconciler", "--data-dir", str(self.data_dir)]
        argv += ["--grpc-addr", "127.0.0.1:0"]

        def launch(ready: bool = True) -> Managed:
            env = _base_env(self.procs.marker, self.service_env)
            proc = Managed(argv, env, self.procs._log("reconciler"))
            self.procs.started.append(proc)
            if ready:
                proc.wait_for_log(RECONCILER_READY, 30)
            return proc

        service = Service("reconciler", "reconciler", launch(True), launch)
        self.services.append(service)
        return service

    @property
    def address(self) -> str:
        """The gRPC address of the control plane (direct)."""
        return self._server_address

    def token(self) -> str:
        if self.topology == "split":
            return self._runtime_token
        return (self.data_dir / "runtime.token").read_text().strip()

    def start_agent(
        self,
        name: str,
        limit: int = 1,
        self_fence_after_ms: int | None = None,
        through_proxy: bool = False,
        wait: bool = True,
        keepalive_ms: int = 1000,
        grace_ms: int = 1000,
        generated_id: bool = False,
        **flags: object,
    ) -> Service:
        """A reference agent (instance id ``name``-<cluster>) with a state dir of its own;
        ``through_proxy`` puts a proxy of its own (``handle.proxy``) in front of the gRPC
        port, so one agent can be partitioned while others stay connected. ``generated_id``:
        no ``--instance-id``; the agent makes its id (and its Start journal) in the state
        dir, so it can prove a Start never reached it (docs/runtime-protocol.md)."""
        self._agents += 1
        state_dir = self.tmp_dir / f"agent-{self._agents}"
        if len(str(state_dir / "agent.sock")) >= 100:  # unix socket paths are short
            state_dir = Path(f"/tmp/tra-{uuid.uuid4().hex[:12]}")
        proxy = None
        server = self._server_address
        if through_proxy:
            host, port = self._server_address.rsplit(":", 1)
            proxy = self._proxy((host, int(port)), f"grpc-{name}")
            server = proxy.address
        extra = [] if generated_id else ["--instance-id", name]
        extra += ["--keepalive-ms", str(keepalive_ms)]
        extra += ["--grace-ms", str(grace_ms)]
        if self_fence_after_ms is not None:
            extra += ["--self-fence-after-ms", str(self_fence_after_ms)]
        for flag, value in flags.items():
            extra += [f"--{flag.replace('_', '-')}", str(value)]

        def launch(ready: bool = True) -> Managed:
            return self.procs.agent(
                server, self.token(), OWNER, state_dir, limit, tuple(extra), wait=ready
            )

        process = launch(wait)
        instance_id = name
        if generated_id:  # written before the agent's first Hello
            path = state_dir / "instance_id"
            instance_id = self.eventually(
                lambda: (path.read_text().strip() or None) if path.exists() else None,
                10,
                "the agent's generated instance id",
            )
        service = Service(
            name,
            "agent",
            process,
            launch,
            instance_id=instance_id,
            state_dir=state_dir,
            proxy=proxy,
        )
        self.services.append(service)
        return service

    def wait_observed(self, agent: Service, timeout: float = 15.0) -> None:
        """Until the capacity service holds a fresh observation of ``agent`` (its first
        heartbeat was stored), read through GetOccupancy."""
        self.eventually(
            lambda: self.occupancy(agent).observation_fresh, timeout, f"{agent.name} observed"
        )

    def agents(self) -> list[Service]:
        return [s for s in self.services if s.kind == "agent"]

    def _signal(self, service: Service, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(service.pid, signum)

    def kill(self, service: Service) -> None:
        """SIGKILL the process (its process group; an agent's commands live on)."""
        service.proc.kill()
        service.frozen = False

    def stop(self, service: Service, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait (bounded), then SIGKILL; the exit code."""
        if service.frozen:
            self.thaw(service)
        return service.proc.stop(timeout)

    def freeze(self, service: Service) -> None:
        """SIGSTOP the process group: alive, silent, holding its sockets."""
        self._signal(service, signal.SIGSTOP)
        service.frozen = True

    def thaw(self, service: Service) -> None:
        self._signal(service, signal.SIGCONT)
        service.frozen = False

    def restart(self, service: Service, wait: bool = True) -> Service:
        """Start it again with the same arguments and data (after a kill or stop)."""
        if service.alive():
            raise AssertionError(f"{service.name} still runs; kill or stop it first")
        service.proc = service.launch(wait)
        if service.kind == "server" and self._api is not None:
            self._api.address = self._server_address  # unchanged: restarts bind the same port
        return service

    def kill_commands(self, agent: Service) -> None:
        """SIGKILL every command and supervisor of an agent (proven against /proc), as if
        its machine died; ``spans()`` ends the commands' open spans here."""
        if agent.state_dir is not None:
            kill_tasks(agent.state_dir)
        self._command_kills.append(time.time())

    # -- Redis ---------------------------------------------------------------------------------

    def _take_redis_db(self) -> int:
        REDIS_LOCK_DIR.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + 120
        while True:
            for db in REDIS_DBS:
                fd = os.open(REDIS_LOCK_DIR / f"{db}.lock", os.O_CREAT | os.O_RDWR, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self._redis_lock = fd
                return db
            if time.monotonic() > deadline:
                raise AssertionError("no free Redis database for a fault cluster in 120 s")
            time.sleep(0.5)

    def redis_cli(self, *args: str) -> str:
        """A command against the test's Redis db, directly (not through the proxy)."""
        done = subprocess.run(
            ["redis-cli", "-h", REDIS_HOST, "-p", str(REDIS_PORT), "-n", str(self.redis_db), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return done.stdout.strip()

    def flush_redis(self) -> None:
        """FLUSHDB of the test's own Redis db (never another test's)."""
        assert self.redis_db is not None and self.redis_db in REDIS_DBS
        self.redis_cli("FLUSHDB")

    # -- the API -------------------------------------------------------------------------------

    @property
    def api(self) -> Api:
        assert self._api is not None, "start the cluster first"
        return self._api

    def api_via_proxy(self, timeout_s: float = CALL_TIMEOUT_S) -> Api:
        """A client whose calls go through ``grpc_proxy`` (closed with the cluster)."""
        assert self.grpc_proxy is not None
        api = Api(
            self.grpc_proxy.address,
            timeout_s,
            self._capacity_address,
            self.api_token,
            self.service_token,
        )
        self._apis.append(api)
        return api

    def side_effect(self, body: str) -> str:
        """A command that logs its real start and end to ``side_effect_log``."""
        return side_effect_command(self.side_effect_log, body)

    def spans(self) -> list[Span]:
        """The side-effect log; a span left open by a command that ``kill_commands`` killed
        (its pid is gone now) ends at that kill, with exit code 137."""
        spans = parse_side_effects(self.side_effect_log)
        closed = []
        for span in spans:
            kill = next((t for t in self._command_kills if t >= span.start), None)
            if span.end is None and kill is not None and not live_process(span.pid):
                span = replace(span, end=kill, exit_code=137)
            closed.append(span)
        return closed

    def gate(self, name: str) -> Path:
        """A file the test creates to let a command go on (see ``wait_gate``)."""
        return self.tmp_dir / f"gate-{name}"

    @staticmethod
    def wait_gate(gate: Path) -> str:
        """Shell that blocks until ``gate`` exists."""
        return f"while [ ! -e '{gate}' ]; do sleep 0.05; done"

    @staticmethod
    def exit_status(agent: Service, attempt_id: str) -> Path:
        """Where the agent's supervisor records the command's exit status."""
        assert agent.state_dir is not None
        return agent.state_dir / "tasks" / attempt_id / "status.json"

    def submit(
        self,
        task_id: str,
        command: str | list[str] = "true",
        *,
        idempotent: bool = False,
        max_attempts: int = 1,
        **fields: Any,
    ) -> str:
        return self.api.submit(
            task_id, command, idempotent=idempotent, max_attempts=max_attempts, **fields
        )

    def get(self, run_id: str) -> common_pb2.Run:
        run = self.api.get(run_id)
        self.history.setdefault(run_id, []).append(
            (time.monotonic(), display(run), run.event_sequence)
        )
        return run

    def events(self, run_id: str) -> list[common_pb2.RunEvent]:
        return self.api.events(run_id)

    def output(self, run_id: str) -> str:
        return self.api.output(run_id)

    def cancel(self, run_id: str, reason: str = "faults") -> run_service_pb2.CancelRunResponse:
        return self.api.cancel(run_id, reason)

    def resolve(
        self, run_id: str, resolution: run_service_pb2.Resolution.ValueType, reason: str
    ) -> common_pb2.Run:
        return self.api.resolve(run_id, resolution, reason)

    def occupancy(self, agent: Service | str) -> capacity_service_pb2.Occupancy:
        instance = agent.instance_id if isinstance(agent, Service) else agent
        return self.api.occupancy(instance)

    def displayed(self, run_id: str) -> list[str]:
        """Display states seen by ``get``/``wait_for`` so far, repeats squashed."""
        seen = [d for _, d, _ in self.history.get(run_id, [])]
        return [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]

    def wait_for(
        self,
        run_id: str,
        until: Callable[[common_pb2.Run], bool] | str | Iterable[str],
        timeout: float = 30.0,
        what: str = "",
    ) -> common_pb2.Run:
        """Poll GetRun every ~50 ms until ``until`` holds: a predicate on the run, or display
        states. Calls that fail (the server is down or cut off) are retried until the
        deadline; the failure message names the seed and the logs."""
        if isinstance(until, str):
            until = (until,)
        predicate: Callable[[common_pb2.Run], bool]
        if callable(until):
            predicate = until
        else:
            states = tuple(until)
            what = what or f"display in {states}"
            predicate = lambda run: display(run) in states  # noqa: E731
        deadline = time.monotonic() + timeout
        last: common_pb2.Run | None = None
        error: grpc.RpcError | None = None
        while True:
            try:
                last = self.get(run_id)
                error = None
                if predicate(last):
                    return last
            except grpc.RpcError as failed:
                error = failed
            if time.monotonic() >= deadline:
                now = f"{display(last)} ({last.display_reason})" if last is not None else "?"
                raise AssertionError(
                    f"run {run_id}: timed out after {timeout}s waiting for "
                    f"{what or predicate}; now {now}; displayed {self.displayed(run_id)}; "
                    f"last error {error!r}; {self.describe()}"
                )
            time.sleep(POLL_S)

    def eventually(self, check: Callable[[], T | None], timeout: float, what: str) -> T:
        """Poll ``check`` until it returns something truthy (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(grpc.RpcError):
                value = check()
                if value:
                    return value
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout}s: {what}; {self.describe()}")
            time.sleep(POLL_S)
