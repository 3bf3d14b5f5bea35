"""What bench.lifecycle's sides share: a measured round, a peer, and the count window a
round opens around its measured part (bench/statements.py; a no-op when not counting)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bench.ingest import CpuMeter, cores


@dataclass
class Measured:
    side: str
    jobs: int
    seconds: float
    produced_s: float  # until the last create/enqueue returned
    used: dict[str, float]

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"{self.side:<13} {self.rate:7.0f} runs/s ({self.jobs} in {self.seconds:.2f} s;"
            f" creates done after {self.produced_s:.2f} s); cores: {cores(self.used)};"
            f" CPU ms per job: {self.cpu_ms_per_job()}"
        )

    def cpu_ms_per_job(self) -> str:
        """Each process's CPU per job: what a job costs it, to compare across rounds and
        hosts whose speed differs (the rate alone mixes cost and the host's pace)."""
        if self.jobs <= 0:
            return "-"
        per_job = self.seconds * 1000 / self.jobs
        return ", ".join(f"{name} {used * per_job:.2f}" for name, used in self.used.items())


class Window(Protocol):
    """Brackets a round's measured part: ``begin`` right before the first create/enqueue
    (``exclude``: backends of the harness's own, e.g. a peer's done-poller), ``end`` after
    the last job is done."""

    async def begin(self, exclude: Iterable[int] = ()) -> None: ...

    async def end(self) -> None: ...


class NoWindow:
    async def begin(self, exclude: Iterable[int] = ()) -> None:
        return None

    async def end(self) -> None:
        return None


class Peer(Protocol):
    name: str
    unit: str  # what its rate counts: "jobs", "workflows"

    async def prepare(self, url: str) -> None:
        """Whatever the peer needs in its (fresh) database before its first round."""

    async def round(
        self, url: str, runs: int, warmup: int, producers: int, meter: CpuMeter, window: Window
    ) -> Measured: ...

    async def verify(self, url: str, expected: int) -> str:
        """``checked: ...`` when every job is done and nothing else is there, else
        ``MISMATCH: ...``."""


def rate(parts: list[Measured]) -> float:
    seconds = sum(m.seconds for m in parts)
    return sum(m.jobs for m in parts) / seconds if seconds > 0 else 0.0


def ratios(
    results: dict[str, list[Measured]],
    ours: Sequence[str],
    peers: list[Peer],
    runs: int,
    rounds: int,
) -> float:
    """One ratio line per truerun side (``ours``) and peer (side / peer); returns the first
    side's against pgqueuer (or 0)."""
    rates = {side: rate(ms) for side, ms in results.items()}
    times = f" x {rounds} rounds" if rounds > 1 else ""
    shared = f"{os.cpu_count()} cores shared by server, workers, load and PostgreSQL"
    first = 0.0
    for side in ours:
        for peer in peers:
            ratio = rates[side] / rates[peer.name] if rates[peer.name] else 0.0
            vs = "" if peer.name == "pgqueuer" else f" vs {peer.name}"
            label = "ratio" if side == "truerun" else f"{side} ratio"
            print(
                f"{label}{vs} {ratio:.2f} ({side} {rates[side]:.0f} runs/s, {peer.name}"
                f" {rates[peer.name]:.0f} {peer.unit}/s, {runs} each{times}; {shared})"
            )
            if side == ours[0] and peer.name == "pgqueuer":
                first = ratio
    return first


async def worker_line(stdout: asyncio.StreamReader, word: bytes, who: str) -> list[bytes]:
    """The fields of a process's next line starting with ``word``, whatever it prints before."""
    seen: list[bytes] = []
    while line := await stdout.readline():
        fields = line.split()
        if fields[:1] == [word]:
            return fields
        seen.append(line)
    raise RuntimeError(f"{who} ended before {word!r}: {seen!r}")
