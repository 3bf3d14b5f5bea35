"""Runtime events per second through the whole gRPC path into PostgreSQL, next to pgbench.

The server is the product's own ``truerun dev`` (``python -m services.cli.main dev``) in a
process of its own, on a fresh PostgreSQL database. This process is the load: 16 runtime
instances (distinct ``runtime_instance_id``, one owner), each with its own channel and
``Connect`` stream. Setup goes through the real protocol: runs are created with
``RunService.CreateRun`` (pinned to their runtime), each runtime sends Hello and a heartbeat
with D = runs per stream, answers every Start with an accepted StartResult, ``ACCEPTED``
(seq 1) and ``RUNNING`` (seq 2), and waits for the acks. Then each stream sends ``OUTPUT``
events (a small payload) with increasing seq, round-robin over its attempts, keeping at most
``--window`` events unacknowledged, for ``--seconds``. Rate = events acknowledged in the
window; latency = event put on the stream -> its Ack read.

The server applies what a stream buffered as one micro-batch (``EventIngest.ingest``: one
``load_attempts`` read, the events of each attempt folded into one decision, the writes in one
transaction, then one Ack per attempt). pgbench runs the single-event transaction of the same
shape on runs of its own: the store's ``LOAD_ATTEMPTS`` select for one attempt plus the
``STATEMENTS[(UPDATE, UPDATE)]`` CTE of a real ``RuntimeNote`` (OUTPUT) decision, SQL text
imported from ``coordinator.store.postgres.sql`` and ``$n`` turned into pgbench variables the way
``bench.transition`` does; 16 clients, same seconds. The ratio says how much of PostgreSQL's
own single-event rate the whole path keeps.

Heartbeats: every 5 s by default, as the server's Welcome asks. ``--heartbeat-s 0`` sends them
only between measured rounds (a heartbeat's lease renewal can deadlock with a batch apply;
see bench/README.md).

    .venv/bin/python -m bench.ingest --seconds 20

See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import uvloop
from google.protobuf import struct_pb2
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import run_service_pb2, run_service_pb2_grpc, runtime_service_pb2_grpc
from truerun.v1 import runtime_service_pb2 as pb

from bench.server import ServerProcess, start_server, stop_server
from bench.transition import (
    EVENT_BASE,
    EVENT_BASE_STEP,
    PGBENCH_BASE,
    SAMPLE_NOW,
    WRITERS,
    Measured,
    PgbenchScript,
    _constant,
    _execute,
    _fetchval,
    _one_line,
    _progress,
    _substitute,
    _total,
    run_pgbench,
    seed,
)
from coordinator.api.bearer import bearer_interceptors
from coordinator.domain import commands as c
from coordinator.domain.decide import AttemptWrite, Context, RunWrite, decide
from coordinator.domain.model import Actor, Attempt, Run
from coordinator.domain.states import ActorType, AttemptStatus, RunStatus
from coordinator.service.transitions import Transitions
from coordinator.store.postgres import PostgresStore
from coordinator.store.postgres.sql import LOAD_ATTEMPTS, STATEMENTS
from coordinator.store.postgres.writer import parameters
from coordinator.store.rows import attempt_values, run_values
from kernel.db.migrate import upgrade
from tests.support.databases import create_pg_database, drop_pg_database
from truerun_runtime._stream import Batcher

STREAMS = WRITERS  # 16 runtime streams; pgbench gets as many clients
OWNER = "bench-owner"  # the runtimes' owner (the pgbench runs belong to bench.transition's)
PROJECT = "bench"
RUNTIME_TOKEN = "bench-runtime-token"
API_TOKEN = "bench-api-token"  # every RunService call authenticates (coordinator/api/auth.py)


def api_channel(address: str) -> grpc.aio.Channel:
    """A channel whose calls carry the bench's API token."""
    return grpc.aio.insecure_channel(address, interceptors=bearer_interceptors(API_TOKEN))


DEVICE = "device-1"
#: Every OUTPUT event's payload, shaped like the reference agent's
#: (truerun_runtime/agent/output.py).
PAYLOAD: dict[str, Any] = {"stream": "output", "data": "bench output line\n"}
HEARTBEAT_S = 5.0  # the server's Welcome says 5 s; observations live 15 s, leases 30 s
PGBENCH_INSTANCE = "pgbench-runtime"
PGBENCH_LEASE_MS = 86_400_000  # nobody renews pgbench's leases: the lease reconciler must wait
STALL_S = 15.0  # a stream with events in flight and no ack for this long has failed
SCHEDULER = Actor(ActorType.SCHEDULER, "bench")


def output_payload() -> struct_pb2.Struct:
    body = struct_pb2.Struct()
    body.update(PAYLOAD)
    return body


# -- the server process (bench/server.py) ----------------------------------------------------


def server_env() -> dict[str, str]:
    """What the benches' ``truerun dev`` accepts: one runtime token for OWNER, one API token."""
    return {
        "TRUERUN_RUNTIME_TOKENS": f"{OWNER}:{RUNTIME_TOKEN}",
        "TRUERUN_API_TOKENS": f"bench={API_TOKEN}:*:owners=*",
    }


# -- CPU accounting ---------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """utime + stime of one process (its threads included), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot, all cores added up."""
    parts = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(parts[:8]) - parts[3] - parts[4]) / _TICK


def postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@dataclass
class CpuMeter:
    """Average cores used over a window: named processes, waited-for children (pgbench),
    every PostgreSQL process (sampled, so backends that exit inside the window count), and
    the whole machine (other work on it included)."""

    pids: dict[str, int]
    start_wall: float = 0.0
    start: dict[str, float] = field(default_factory=dict)
    start_children: float = 0.0
    start_machine: float = 0.0
    postgres_first: dict[int, float] = field(default_factory=dict)
    postgres_last: dict[int, float] = field(default_factory=dict)
    _sampler: asyncio.Task[None] | None = None

    def begin(self) -> None:
        self.start_wall = time.perf_counter()
        self.start = {name: process_cpu_s(pid) for name, pid in self.pids.items()}
        self.start_children = _children_cpu_s()
        self.start_machine = machine_cpu()
        self.postgres_first = {pid: process_cpu_s(pid) for pid in postgres_pids()}
        self.postgres_last = dict(self.postgres_first)
        self._sampler = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            self._sample_once()

    def _sample_once(self) -> None:
        for pid in postgres_pids():
            cpu = process_cpu_s(pid)
            if cpu:
                self.postgres_last[pid] = cpu

    def end(self) -> dict[str, float]:
        if self._sampler is not None:
            self._sampler.cancel()
        self._sample_once()
        wall = max(time.perf_counter() - self.start_wall, 1e-9)
        used = {
            name: (process_cpu_s(pid) - self.start[name]) / wall for name, pid in self.pids.items()
        }
        children = _children_cpu_s() - self.start_children
        if children > 0.01 * wall:
            used["pgbench"] = children / wall
        used["postgres"] = (
            sum(cpu - self.postgres_first.get(pid, 0.0) for pid, cpu in self.postgres_last.items())
            / wall
        )
        used["machine"] = (machine_cpu() - self.start_machine) / wall
        return used


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def line(side: str, m: Measured) -> str:
    return (
        f"{side:<8} {m.rate:7.0f} events/s ({m.transitions} in {m.seconds:.0f} s;"
        f" p50 {m.percentile_ms(0.50):.1f} ms, p99 {m.percentile_ms(0.99):.1f} ms)"
    )


def cores(used: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in used.items())


# -- a runtime over the real protocol ----------------------------------------------------------


@dataclass
class Started:
    """An attempt this runtime accepted: what its events must carry, and their seqs."""

    run_id: str
    attempt_id: str
    runtime_task_id: str
    callback_token: str
    next_seq: int = 1
    acked: int = 0
    sent: deque[tuple[int, float]] = field(default_factory=deque)  # (seq, perf_counter)


class RuntimeStream:
    """One runtime instance: a channel, a Connect stream, a writer task and a reader task.

    ``on_start`` / ``on_ack`` are called by the reader for every Start / Ack."""

    def __init__(
        self,
        address: str,
        instance: str,
        limit: int,
        owner: str = OWNER,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.address, self.instance, self.limit, self.owner = address, instance, limit, owner
        #: 0: heartbeats every HEARTBEAT_S only while no load runs on the stream (``busy``)
        self.heartbeat_s = heartbeat_s
        self.busy = False
        self.on_start: Callable[[RuntimeStream, pb.Start], None] = accept_and_run
        self.on_ack: Callable[[RuntimeStream, pb.Ack, float], None] = _note_ack
        self.started: dict[str, Started] = {}
        self.changed = asyncio.Event()  # set by the reader after every message
        self._queue: asyncio.Queue[pb.ConnectRequest | None] = asyncio.Queue()
        self._channel = grpc.aio.insecure_channel(address)
        self._tasks: list[asyncio.Task[None]] = []
        self.error: BaseException | None = None
        self.closing = False

    async def open(self) -> pb.Welcome:
        stub = runtime_service_pb2_grpc.RuntimeServiceStub(self._channel)
        call = stub.Connect(None)
        hello = pb.Hello(
            runtime_token=RUNTIME_TOKEN,
            owner_id=self.owner,
            runtime_instance_id=self.instance,
            routes=[cap.Route(device_id=DEVICE, kind="local")],
            accepts_batches=True,  # as the reference agent: a round's Starts in one message
        )
        self._queue.put_nowait(pb.ConnectRequest(hello=hello))
        self._tasks.append(asyncio.create_task(self._write(call)))
        first = await asyncio.wait_for(call.read(), 10)
        if not isinstance(first, pb.ConnectResponse) or not first.HasField("welcome"):
            raise RuntimeError(f"{self.instance}: no Welcome ({first!r})")
        self._tasks.append(asyncio.create_task(self._read(call)))
        self._tasks.append(asyncio.create_task(self._heartbeats()))
        return first.welcome

    async def _write(
        self, call: grpc.aio.StreamStreamCall[pb.ConnectRequest, pb.ConnectResponse]
    ) -> None:
        batcher = Batcher(self._queue)  # the agent's writer: queued events go together
        while (message := await batcher.next()) is not None:
            await call.write(message)
        await call.done_writing()

    async def _read(
        self, call: grpc.aio.StreamStreamCall[pb.ConnectRequest, pb.ConnectResponse]
    ) -> None:
        try:
            while isinstance(message := await call.read(), pb.ConnectResponse):
                kind = message.WhichOneof("kind")
                if kind == "ack":
                    self.on_ack(self, message.ack, time.perf_counter())
                elif kind == "acks":
                    now = time.perf_counter()
                    for ack in message.acks.acks:
                        self.on_ack(self, ack, now)
                elif kind == "start":
                    self.on_start(self, message.start)
                elif kind == "starts":
                    for start in message.starts.starts:
                        self.on_start(self, start)
                self.changed.set()
            self.error = RuntimeError(
                "the server ended the stream (an error in its reader, such as a deadlock in the"
                " heartbeat's lease renewal: look for 'deadlock detected' in the PostgreSQL log)"
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.error = error
        self.changed.set()

    async def _heartbeats(self) -> None:
        while True:
            if self.heartbeat_s > 0 or not self.busy:
                self.heartbeat()
            await asyncio.sleep(self.heartbeat_s or HEARTBEAT_S)

    def heartbeat(self) -> None:
        active = [s.runtime_task_id for s in self.started.values()][: self.limit]
        observation = cap.Observation(
            owner_id=self.owner,
            runtime_instance_id=self.instance,
            routes=[cap.Route(device_id=DEVICE, kind="local")],
            limit=self.limit,
            active=len(active),
            active_task_ids=active,
        )
        self.send(pb.ConnectRequest(heartbeat=pb.Heartbeat(observation=observation)))

    def send(self, message: pb.ConnectRequest) -> None:
        self._queue.put_nowait(message)

    def event(
        self,
        started: Started,
        kind: pb.RuntimeEventType.ValueType,
        payload: struct_pb2.Struct | None = None,
        turn_status: pb.TurnStatus.ValueType = pb.TURN_STATUS_UNSPECIFIED,
        exit_code: int | None = None,
    ) -> int:
        seq = started.next_seq
        started.next_seq += 1
        event = pb.RuntimeEvent(
            attempt_id=started.attempt_id,
            runtime_task_id=started.runtime_task_id,
            seq=seq,
            type=kind,
            turn_status=turn_status,
            callback_token=started.callback_token,
            payload=payload,
            exit_code=exit_code,
        )
        self.send(pb.ConnectRequest(event=event))
        return seq

    def check(self) -> None:
        if self.error is not None and not self.closing:
            raise RuntimeError(f"{self.instance}: stream failed: {self.error}")

    async def close(self) -> None:
        self.closing = True
        self._queue.put_nowait(None)
        for task in self._tasks[2:]:
            task.cancel()
        await asyncio.sleep(0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._channel.close(None)


def accept_and_run(stream: RuntimeStream, start: pb.Start) -> None:
    """A no-op runtime's answer to Start: accepted (seq 1), ACCEPTED, RUNNING."""
    started = Started(start.run_id, start.attempt_id, start.runtime_task_id, start.callback_token)
    stream.started[start.attempt_id] = started
    result = pb.StartResult(
        attempt_id=start.attempt_id,
        runtime_task_id=start.runtime_task_id,
        accepted=True,
        seq=1,
    )
    stream.send(pb.ConnectRequest(start_result=result))
    stream.event(started, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    stream.event(started, pb.RUNTIME_EVENT_TYPE_RUNNING, turn_status=pb.TURN_STATUS_ACTIVE)


def _note_ack(stream: RuntimeStream, ack: pb.Ack, now: float) -> None:
    started = stream.started.get(ack.attempt_id)
    if started is not None:
        started.acked = max(started.acked, ack.seq)


# -- the Python side: load over the streams ----------------------------------------------------


@dataclass
class Window:
    """The measured window, shared by every stream's ack handler."""

    start: float = float("inf")
    end: float = float("inf")
    acked: int = 0  # acknowledged inside [start, end)
    acked_total: int = 0  # every OUTPUT event acknowledged, warm-up included
    latencies_s: list[float] = field(default_factory=list)


class Pump:
    """Keeps up to ``window`` OUTPUT events of one stream unacknowledged."""

    def __init__(self, stream: RuntimeStream, window: int, measured: Window) -> None:
        self.stream = stream
        self.window = window
        self.measured = measured
        self.attempts = list(stream.started.values())
        self.inflight = 0
        self.room = asyncio.Event()
        self.payload = output_payload()
        self._next = 0
        stream.on_ack = self._on_ack

    def _on_ack(self, stream: RuntimeStream, ack: pb.Ack, now: float) -> None:
        started = stream.started.get(ack.attempt_id)
        if started is None:
            return
        started.acked = max(started.acked, ack.seq)
        sent = started.sent
        m = self.measured
        while sent and sent[0][0] <= ack.seq:
            _, t0 = sent.popleft()
            self.inflight -= 1
            m.acked_total += 1
            if m.start <= now < m.end:
                m.acked += 1
                m.latencies_s.append(now - t0)
        self.room.set()

    async def run(self, until: float) -> None:
        self.stream.busy = True
        try:
            await self._run(until)
        finally:
            self.stream.busy = False

    async def _run(self, until: float) -> None:
        attempts, n = self.attempts, len(self.attempts)
        while time.perf_counter() < until:
            now = time.perf_counter()
            while self.inflight < self.window:
                started = attempts[self._next % n]
                self._next += 1
                seq = self.stream.event(started, pb.RUNTIME_EVENT_TYPE_OUTPUT, self.payload)
                started.sent.append((seq, now))
                self.inflight += 1
            self.room.clear()
            await self._wait()
        while self.inflight:  # drain, so every round starts from acknowledged state
            self.room.clear()
            await self._wait()

    async def _wait(self) -> None:
        try:
            await asyncio.wait_for(self.room.wait(), STALL_S)
        except TimeoutError:
            self.stream.check()
            raise RuntimeError(
                f"{self.stream.instance}: {self.inflight} events unacknowledged for {STALL_S:.0f} s"
                " (the server stopped applying this stream's events; look for 'deadlock detected'"
                " in the PostgreSQL log)"
            ) from None
        self.stream.check()


async def python_round(
    pumps: Sequence[Pump], measured: Window, warmup: int, seconds: int, meter: CpuMeter
) -> tuple[Measured, dict[str, float]]:
    measured.acked, measured.latencies_s = 0, []
    for pump in pumps:  # renew the leases now (in quiet mode the only renewal in the round)
        pump.stream.heartbeat()
    await asyncio.sleep(0.5)
    now = time.perf_counter()
    measured.start = now + warmup
    measured.end = measured.start + seconds
    tasks = [asyncio.create_task(p.run(measured.end)) for p in pumps]
    await asyncio.sleep(max(measured.start - time.perf_counter(), 0))
    meter.begin()
    await asyncio.sleep(max(measured.end - time.perf_counter(), 0))
    used = meter.end()
    await asyncio.gather(*tasks)
    result = Measured(measured.acked, float(seconds), measured.latencies_s)
    measured.start = measured.end = float("inf")
    return result, used


# -- setup through the real protocol -----------------------------------------------------------


def instance_name(i: int) -> str:
    return f"bench-runtime-{i:02d}"


async def create_runs(address: str, instances: Sequence[str], per_instance: int) -> int:
    """Queued runs through RunService.CreateRun, each pinned to one of the runtimes."""
    async with api_channel(address) as channel:
        stub = run_service_pb2_grpc.RunServiceStub(channel)
        requests = [
            run_service_pb2.CreateRunRequest(
                project_id=PROJECT,
                owner_id=OWNER,
                task_id=f"task-{instance}",
                pinned_runtime_instance_id=instance,
            )
            for instance in instances
            for _ in range(per_instance)
        ]
        queue: asyncio.Queue[run_service_pb2.CreateRunRequest] = asyncio.Queue()
        for request in requests:
            queue.put_nowait(request)

        async def worker() -> int:
            made = 0
            while not queue.empty():
                request = queue.get_nowait()
                response = await stub.CreateRun(request, timeout=30)
                assert response.run.id
                made += 1
            return made

        return sum(await asyncio.gather(*(worker() for _ in range(16))))


async def start_streams(
    address: str, per_stream: int, heartbeat_s: float = HEARTBEAT_S
) -> list[RuntimeStream]:
    """16 runtimes connect, report D = per_stream, and take every Start to RUNNING."""
    instances = [instance_name(i) for i in range(STREAMS)]
    await create_runs(address, instances, per_stream)
    streams = [
        RuntimeStream(address, instance, per_stream, heartbeat_s=heartbeat_s)
        for instance in instances
    ]
    await asyncio.gather(*(s.open() for s in streams))
    deadline = time.perf_counter() + 120
    while True:
        for s in streams:
            s.check()
        ready = sum(
            1 for s in streams for st in s.started.values() if st.acked >= 2 and st.next_seq == 3
        )
        if ready == STREAMS * per_stream:
            return streams
        if time.perf_counter() > deadline:
            raise RuntimeError(f"only {ready} of {STREAMS * per_stream} attempts reached RUNNING")
        await asyncio.sleep(0.05)


# -- the pgbench side -------------------------------------------------------------------------


def pgbench_claim(run_id: str) -> c.Claim:
    return c.Claim(
        run_id,
        SCHEDULER,
        runtime_instance_id=PGBENCH_INSTANCE,
        runtime_device_id=DEVICE,
        lease_ttl_ms=PGBENCH_LEASE_MS,
    )


async def seed_running(store: PostgresStore, count: int) -> list[str]:
    """pgbench's runs: created with decimal ids (run base + 2j, attempt base + 2j + 1), then
    Claim, StartFence, RuntimeAccepted (seq 1), RuntimeRunning (seq 2) through Transitions."""
    run_ids = await seed(store, PGBENCH_BASE, count)
    transitions = Transitions(store)
    runtime = Actor(ActorType.RUNTIME, PGBENCH_INSTANCE)

    async def start(ids: Sequence[str]) -> None:
        for run_id in ids:
            claimed = await transitions.execute(pgbench_claim(run_id))
            attempt = claimed.attempt
            assert attempt is not None and attempt.id == str(int(run_id) + 1)
            fence = c.StartFence(
                run_id, SCHEDULER, lease_token=attempt.lease_token or "", callback_token_hash="x"
            )
            await transitions.execute(fence)
            base = (run_id, attempt.id, attempt.runtime_task_id)
            await transitions.execute(c.RuntimeAccepted(*base, 1, runtime))
            await transitions.execute(c.RuntimeRunning(*base, 2, runtime))

    await asyncio.gather(*(start(run_ids[w::STREAMS]) for w in range(STREAMS)))
    running = await _fetchval(
        store,
        "SELECT count(*) FROM runs r JOIN attempts a ON a.id = r.current_attempt_id"
        " WHERE r.id = ANY($1::text[]) AND r.status = 'running' AND a.status = 'running'"
        " AND a.last_event_seq = 2",
        run_ids,
    )
    if running != count:
        raise RuntimeError(f"seeding made {running} of the {count} expected running runs")
    return run_ids


def note_decision(run: Run, attempt: Attempt) -> tuple[str, list[str], dict[str, Any]]:
    """The store's CTE for a real RuntimeNote(OUTPUT) decision on (run, attempt)."""

    def no_new_id() -> str:
        raise AssertionError("a note makes no new ids")

    runtime = Actor(ActorType.RUNTIME, PGBENCH_INSTANCE)
    command = c.RuntimeNote(
        run.id,
        attempt.id,
        attempt.runtime_task_id,
        attempt.last_event_seq + 1,
        runtime,
        kind=c.NoteKind.OUTPUT,
        details=dict(PAYLOAD),
    )
    ctx = Context(now_ms=SAMPLE_NOW, new_id=no_new_id, new_token=no_new_id)
    decision = decide(command, run, attempt, ctx)
    assert decision.run_write is RunWrite.UPDATE
    assert decision.attempt_write is AttemptWrite.UPDATE
    assert len(decision.events) == 1
    sql, placeholders = STATEMENTS[(decision.run_write, decision.attempt_write)]
    values = parameters(decision, None)  # exactly what PostgresStore.apply binds
    names: list[str] = placeholders.bind({name: name for name in values})
    if any(n is None for n in names):
        raise AssertionError("a placeholder has no parameter value")
    return sql, names, values


def pgbench_script(run: Run, attempt: Attempt, runs_per_client: int) -> PgbenchScript:
    """LOAD(run, attempt) + the OUTPUT note's CTE, with the ``$n`` as pgbench variables."""
    assert run.status is RunStatus.RUNNING and attempt.status is AttemptStatus.RUNNING
    sql, names, values = note_decision(run, attempt)
    run_row, attempt_row = run_values(run), attempt_values(attempt)
    defines: dict[str, str] = {"nil": "nil", "i": "0"}
    sets: dict[str, str] = {}

    def expr(name: str) -> str:
        value = values[name]
        if name == "run_id":
            return ":rid"
        if name == "expected_version":
            return ":l_version"
        if name == "r_version":
            assert value == run.version + 1
            sets["next_version"] = ":l_version + 1"
            return ":next_version"
        if name == "a_key":
            assert value == attempt.id
            return ":l_a_id"
        if name == "a_expected_status":
            assert value == attempt_row["status"]
            return ":l_a_status"
        if name == "a_expected_seq":
            assert value == attempt.last_event_seq
            return ":l_a_last_event_seq"
        if name == "a_last_event_seq":
            assert value == attempt.last_event_seq + 1
            sets["next_seq"] = ":l_a_last_event_seq + 1"
            return ":next_seq"
        if name == "ev1":  # the event id (uuid7 in Python): a distinct integer per transaction
            assert len(value) == 1
            return "ARRAY[:ev_id0]"
        if name in ("ev5", "o1"):  # the event's and the output piece's attempt
            assert value == [attempt.id]
            return "ARRAY[:l_a_id]"
        if name == "o2":  # the piece's byte offset: distinct per transaction, as ev_id0
            return "ARRAY[:ev_id0]"
        if value is None:
            return "NULL"
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and (name.endswith("_ms") or name == "created")
            and SAMPLE_NOW <= value < SAMPLE_NOW + 10**9
        ):
            offset = value - SAMPLE_NOW
            if offset == 0:
                return ":now"
            sets[f"now_plus_{offset}"] = f":now + {offset}"
            return f":now_plus_{offset}"
        column = name[2:]
        if name.startswith("r_") and column in run_row and run_row[column] == value:
            return f":l_{column}"  # carried over from the row the LOAD read
        if name.startswith("a_") and column in attempt_row and attempt_row[column] == value:
            return f":l_a_{column}"
        variable = f"note_{name}"
        defines[variable] = _constant(value)
        return f":{variable}"

    note_sql = _substitute(_one_line(sql), [expr(n) for n in names])
    # What ingest reads for a micro-batch: store.load_attempts([attempt ids]), here of one.
    load_sql = _substitute(_one_line(LOAD_ATTEMPTS), ["ARRAY[:aid]"])
    lines = [
        r"\set i :i + 1",
        rf"\set rid {PGBENCH_BASE} + 2 * (:client_id * {runs_per_client}"
        rf" + mod(:i, {runs_per_client}))",
        r"\set aid :rid + 1",
        r"\set now :t0 + :i",
        rf"\set ev_id0 :ev_base + :i * {STREAMS} + :client_id",
        load_sql + r" \gset l_",
        *(rf"\set {k} {v}" for k, v in sets.items()),
        note_sql + ";",
    ]
    return PgbenchScript("\n".join(lines) + "\n", defines)


# -- driver -----------------------------------------------------------------------------------


@dataclass
class Options:
    seconds: int
    warmup: int
    runs_per_stream: int
    window: int
    rounds: int
    pgbench: str
    keep_db: bool
    show_script: bool
    profile: str
    heartbeat_s: float


async def _verify(store: PostgresStore, owner: str, expected: int, side: str) -> str:
    """Every counted event moved its attempt's seq by one and appended one piece of output
    to the output store (a whole line each: nothing held back)."""
    moved = await _fetchval(
        store,
        "SELECT coalesce(sum(a.last_event_seq - 2), 0) FROM attempts a"
        " JOIN runs r ON r.id = a.run_id WHERE r.owner_id = $1",
        owner,
    )
    outputs = await _fetchval(
        store,
        "SELECT count(*) FROM attempt_output o JOIN attempts a ON a.id = o.attempt_id"
        " WHERE a.owner_id = $1",
        owner,
    )
    if moved != expected or outputs != expected:
        return (
            f"{side}: MISMATCH: {expected} events counted, attempt seqs moved {moved},"
            f" {outputs} output pieces stored"
        )
    return f"{side}: {expected} events committed, checked against attempt seqs and attempt_output"


async def bench(opts: Options) -> float:
    url = await create_pg_database()
    tmp = Path(tempfile.mkdtemp(prefix="truerun-bench-ingest-"))
    server: ServerProcess | None = None
    try:
        await upgrade(url)
        server = await start_server(url, tmp, server_env())
        store = await PostgresStore.connect(url, min_size=4, max_size=STREAMS)
        try:
            return await _bench(store, server, url, tmp, opts)
        except BaseException:
            tail = server.log_path.read_text().splitlines()[-40:]
            print("server log (last lines):", *tail, sep="\n", file=sys.stderr)
            raise
        finally:
            await store.close()
    finally:
        if server is not None:
            await stop_server(server)
        shutil.rmtree(tmp, ignore_errors=True)
        if opts.keep_db:
            print(f"kept database {url}")
        else:
            await drop_pg_database(url)


async def _bench(
    store: PostgresStore, server: ServerProcess, url: str, tmp: Path, opts: Options
) -> float:
    per = opts.runs_per_stream
    beat = f"every {opts.heartbeat_s:g} s" if opts.heartbeat_s else "between rounds"
    print(
        f"code {code_version()}; {STREAMS} streams x {per} runs, window {opts.window},"
        f" heartbeat {beat}"
    )
    _progress(f"setup: {STREAMS} runtimes x {per} runs to RUNNING through {server.address}")
    streams = await start_streams(server.address, per, opts.heartbeat_s)
    _progress(f"setup: {STREAMS * per} pgbench runs to RUNNING through Transitions")
    await seed_running(store, STREAMS * per)
    loaded = await store.load(str(PGBENCH_BASE), str(PGBENCH_BASE + 1))
    assert loaded is not None and loaded.attempt is not None
    script = pgbench_script(loaded.run, loaded.attempt, per)
    script_path = tmp / "ingest.pgbench"
    script_path.write_text(script.text)
    if opts.show_script:
        print(script.text)
        for k, v in script.defines.items():
            print(f"-D {k}={v}")
        print()

    measured = Window()
    pumps = [Pump(s, opts.window, measured) for s in streams]
    meter = CpuMeter({"server": server.pid, "load": os.getpid()})
    t0 = str(time.time_ns() // 1_000_000)
    invocations = 0
    pg_processed = 0
    py_all: list[Measured] = []
    pg_all: list[Measured] = []
    profiled = False
    try:
        await _execute(store, "VACUUM (ANALYZE) runs, attempts, run_events")
        for r in range(opts.rounds):
            order = ("python", "pgbench") if r % 2 == 0 else ("pgbench", "python")
            for side in order:
                await _execute(store, "VACUUM runs, attempts, run_events")
                _progress(f"round {r + 1}: {side}, {opts.warmup} s warm-up + {opts.seconds} s")
                if side == "python":
                    profiler = None
                    if opts.profile and not profiled:  # the first Python round
                        profiler = Profiler(server.pid, opts.profile)
                        await profiler.start()
                        profiled = True
                    m, used = await python_round(pumps, measured, opts.warmup, opts.seconds, meter)
                    if profiler is not None:
                        await profiler.stop()
                    py_all.append(m)
                else:
                    defines = dict(script.defines, t0=t0)
                    if opts.warmup:
                        defines["ev_base"] = str(EVENT_BASE + invocations * EVENT_BASE_STEP)
                        invocations += 1
                        warm = await run_pgbench(
                            opts.pgbench, url, script_path, defines, opts.warmup, None
                        )
                        pg_processed += warm.processed
                    defines["ev_base"] = str(EVENT_BASE + invocations * EVENT_BASE_STEP)
                    invocations += 1
                    meter.begin()
                    result = await run_pgbench(
                        opts.pgbench, url, script_path, defines, opts.seconds, tmp
                    )
                    used = meter.end()
                    pg_processed += result.processed
                    m = result.measured()
                    pg_all.append(m)
                print(f"round {r + 1}: {line(side, m)}; cores: {cores(used)}")
    finally:
        await asyncio.gather(*(s.close() for s in streams))

    py, pg = _total(py_all), _total(pg_all)
    print(await _verify(store, OWNER, measured.acked_total, "python"))
    print(await _verify(store, "owner-1", pg_processed, "pgbench"))
    print(line("python", py))
    print(line("pgbench", pg))
    ratio = py.rate / pg.rate
    rounds = f" x {opts.rounds} rounds" if opts.rounds > 1 else ""
    print(
        f"ratio {ratio:.2f} (python {py.rate:.0f} events/s, pgbench {pg.rate:.0f}/s,"
        f" {STREAMS} streams, window {opts.window}, {opts.seconds} s{rounds};"
        f" {os.cpu_count()} cores shared by server, load, pgbench and PostgreSQL)"
    )
    return ratio


class Profiler:
    """py-spy recording a process (raw collapsed stacks) until ``stop``."""

    def __init__(self, pid: int, output: str) -> None:
        self.pid, self.output = pid, output
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.proc = await asyncio.create_subprocess_exec(
            py_spy,
            "record",
            "--pid",
            str(self.pid),
            "--rate",
            "200",
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            self.output,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its output and exits
            await asyncio.wait_for(self.proc.wait(), 60)


def code_version() -> str:
    """The commit measured, with '+dirty' when the work tree differs from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ingest", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--seconds", type=int, default=20, help="measured seconds per side")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured seconds before each")
    parser.add_argument(
        "--runs",
        type=int,
        default=64,
        help="running attempts per runtime stream (and per pgbench client)",
    )
    parser.add_argument("--window", type=int, default=64, help="unacked events per stream")
    parser.add_argument(
        "--heartbeat-s",
        type=float,
        default=HEARTBEAT_S,
        help="runtime heartbeat interval (renews leases); 0 = only between measured rounds",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="python then pgbench, alternating order per round"
    )
    parser.add_argument("--pgbench", default="pgbench", help="the pgbench binary")
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    parser.add_argument("--show-script", action="store_true", help="print the pgbench script")
    parser.add_argument(
        "--profile", default="", help="py-spy raw (collapsed) profile of the server, to this file"
    )
    ns = parser.parse_args(argv)
    return Options(
        seconds=ns.seconds,
        warmup=ns.warmup,
        runs_per_stream=ns.runs,
        window=ns.window,
        rounds=ns.rounds,
        pgbench=ns.pgbench,
        keep_db=ns.keep_db,
        show_script=ns.show_script,
        profile=ns.profile,
        heartbeat_s=ns.heartbeat_s,
    )


def main(argv: Sequence[str] | None = None, runner: Callable[..., Any] = uvloop.run) -> int:
    opts = parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        runner(bench(opts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
