"""The peers that run in bench's own venv (bench/peers/env.py): DBOS and procrastinate. Each
round starts the peer's worker and its producer process (the same number of producers as the
other sides, one call per job), warms up, then times from the first job made to the worker's
``done`` (its database shows every job finished). Protocol: bench/peers/protocol.py."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from bench.ingest import CpuMeter
from bench.peers.base import Measured, Window, worker_line
from bench.venv import ROOT

READY_TIMEOUT_S = 120  # a cold import + schema + launch on a loaded machine
DONE_TIMEOUT_S = 600


@dataclass
class VenvPeer:
    name: str
    unit: str
    module: str  # run as ``<peer python> -m <module> worker|produce``
    statuses_sql: str  # (status, count) of every job in the database
    done_status: str
    python: Path
    step_sql: str = ""  # (optional) how many jobs recorded their one step
    install: bool = False  # ``<module> install`` sets the schema up (else the worker does)

    async def prepare(self, url: str) -> None:
        if not self.install:  # DBOS migrates its schema at launch, every round alike
            return
        proc = await self._spawn("install", "--url", url)
        if await asyncio.wait_for(proc.wait(), READY_TIMEOUT_S) != 0:
            raise RuntimeError(f"{self.module} install failed (exit {proc.returncode})")

    async def _spawn(self, *args: str) -> asyncio.subprocess.Process:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        return await asyncio.create_subprocess_exec(
            str(self.python),
            "-m",
            self.module,
            *args,
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )

    async def round(
        self, url: str, runs: int, warmup: int, producers: int, meter: CpuMeter, window: Window
    ) -> Measured:
        expect = str(warmup + runs)
        worker = await self._spawn(
            "worker", "--url", url, "--expect", expect, "--warmup", str(warmup)
        )
        producer = await self._spawn("produce", "--url", url, "--producers", str(producers))
        procs = (worker, producer)
        who = f"{self.name} worker"
        try:
            assert worker.stdout is not None and producer.stdout is not None
            assert producer.stdin is not None
            ready = worker_line(worker.stdout, b"ready", who)
            poller = int((await asyncio.wait_for(ready, READY_TIMEOUT_S))[1])
            ready = worker_line(producer.stdout, b"ready", "producer")
            await asyncio.wait_for(ready, READY_TIMEOUT_S)
            if warmup > 0:
                producer.stdin.write(f"{warmup}\n".encode())
                await producer.stdin.drain()
                await worker_line(producer.stdout, b"produced", "producer")
            await asyncio.wait_for(worker_line(worker.stdout, b"warm", who), DONE_TIMEOUT_S)
            await window.begin(exclude=[poller])
            meter.pids.update(worker=worker.pid, load=producer.pid)
            meter.begin()
            t0 = time.time()
            producer.stdin.write(f"{runs}\n".encode())
            await producer.stdin.drain()
            produced = await worker_line(producer.stdout, b"produced", "producer")
            done = await asyncio.wait_for(worker_line(worker.stdout, b"done", who), DONE_TIMEOUT_S)
            used = meter.end()
            producer.stdin.close()
            for proc in procs:
                await asyncio.wait_for(proc.wait(), 60)
            await window.end()
            if int(done[2]) != warmup + runs:
                raise RuntimeError(f"{who}: {done!r}")
            return Measured(self.name, runs, float(done[1]) - t0, float(produced[2]) - t0, used)
        finally:
            meter.pids.pop("worker", None)
            meter.pids["load"] = os.getpid()
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    async def verify(self, url: str, expected: int) -> str:
        connection = await asyncpg.connect(url)
        try:
            statuses = dict(await connection.fetch(self.statuses_sql))
            steps = await connection.fetchval(self.step_sql) if self.step_sql else expected
        finally:
            await connection.close()
        done = statuses.pop(self.done_status, 0)
        if done != expected or statuses or steps != expected:
            return (
                f"MISMATCH: {self.name}: {done} {self.unit} {self.done_status} of {expected},"
                f" others {statuses}, steps recorded {steps}"
            )
        step = f", {steps} steps recorded" if self.step_sql else ""
        return (
            f"checked: {self.name}: {done} {self.unit} {self.done_status},"
            f" none in another state{step}"
        )


def dbos(python: Path) -> VenvPeer:
    return VenvPeer(
        name="dbos",
        unit="workflows",
        module="bench.peers.dbos_peer",
        statuses_sql="SELECT status, count(*) FROM dbos.workflow_status GROUP BY status",
        done_status="SUCCESS",
        python=python,
        step_sql="SELECT count(*) FROM dbos.operation_outputs WHERE function_name = 'noop_step'",
    )


def procrastinate(python: Path) -> VenvPeer:
    return VenvPeer(
        name="procrastinate",
        unit="jobs",
        module="bench.peers.procrastinate_peer",
        statuses_sql="SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status",
        done_status="succeeded",
        python=python,
        install=True,
    )
