"""truerun's side of bench.lifecycle: the producers (one request a run, answered before the
producer's next: a message on a CreateRunStream each, or a CreateRun call each) and a no-op
runtime speaking the real protocol that finishes every Start at once."""

from __future__ import annotations

import asyncio
import time

from google.protobuf import struct_pb2
from truerun.v1 import run_service_pb2, run_service_pb2_grpc
from truerun.v1 import runtime_service_pb2 as pb

from bench.ingest import OWNER, PROJECT, CpuMeter, RuntimeStream, accept_and_run, api_channel
from bench.peers.base import Measured, NoWindow, Window
from bench.server import ServerProcess

SPEC = {"command": "true"}  # what each run carries
TERMINAL_SEQ = 3
#: truerun's sides by the producers' create API (``--create-api``).
CREATE_SIDES = {"stream": "truerun", "unary": "truerun-unary"}


class NoopRuntimes:
    """Runtimes that finish every Start at once; counts runs whose SUCCEEDED was acked."""

    def __init__(self) -> None:
        self.done = 0
        self.target = 0
        self.last_done = 0.0  # time.time() of the last completion
        self.finished = asyncio.Event()

    def on_start(self, stream: RuntimeStream, start: pb.Start) -> None:
        accept_and_run(stream, start)  # accepted (seq 1), ACCEPTED, RUNNING
        started = stream.started[start.attempt_id]
        stream.event(started, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)

    def on_ack(self, stream: RuntimeStream, ack: pb.Ack, now: float) -> None:
        if ack.seq >= TERMINAL_SEQ and stream.started.pop(ack.attempt_id, None) is not None:
            self.done += 1
            if self.done >= self.target:
                self.last_done = time.time()
                self.finished.set()


async def create_runs(address: str, count: int, producers: int, api: str = "stream") -> float:
    """``count`` runs, ``producers`` in flight, one request a run answered before the
    producer's next: with ``api`` "unary" a CreateRun call each, with "stream" one message
    each on the producer's own CreateRunStream. Returns time.time() when done."""
    spec = struct_pb2.Struct()
    spec.update(SPEC)
    async with api_channel(address) as channel:
        stub = run_service_pb2_grpc.RunServiceStub(channel)
        left = count

        def request() -> run_service_pb2.CreateRunRequest:
            return run_service_pb2.CreateRunRequest(
                project_id=PROJECT, owner_id=OWNER, task_id="noop", spec=spec
            )

        async def producer() -> None:
            nonlocal left
            if api == "unary":
                while left > 0:
                    left -= 1
                    response = await stub.CreateRun(request(), timeout=60)
                    assert response.run.id
                return
            call = stub.CreateRunStream(None, timeout=600)
            while left > 0:
                left -= 1
                await call.write(run_service_pb2.CreateRunStreamRequest(request=request()))
                answer = await call.read()
                assert isinstance(answer, run_service_pb2.CreateRunStreamResponse), answer
                assert answer.created.run.id, answer
            await call.done_writing()

        await asyncio.gather(*(producer() for _ in range(producers)))
    return time.time()


async def truerun_round(
    server: ServerProcess,
    runtimes: NoopRuntimes,
    runs: int,
    producers: int,
    meter: CpuMeter,
    window: Window | None = None,
    api: str = "stream",
) -> Measured:
    side = CREATE_SIDES[api]
    runtimes.target = runtimes.done + runs
    runtimes.finished.clear()
    if runs <= 0:  # --warmup 0: nothing to wait for
        return Measured(side, 0, 0.0, 0.0, {})
    window = window or NoWindow()
    await window.begin()
    meter.begin()
    t0 = time.time()
    produced = await create_runs(server.address, runs, producers, api)
    await asyncio.wait_for(runtimes.finished.wait(), 600)
    used = meter.end()
    await window.end()
    return Measured(side, runs, runtimes.last_done - t0, produced - t0, used)
