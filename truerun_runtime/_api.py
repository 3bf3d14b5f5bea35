"""What a runtime plugs into the client: a handler for commands, and reconnect timing."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

from truerun.v1 import capacity_service_pb2 as cpb
from truerun.v1 import runtime_service_pb2 as pb


class RuntimeHandler(Protocol):
    """What a runtime does with the server's commands. Commands are handled one at a time,
    in arrival order; a handler must answer promptly (start the work, do not wait for it)."""

    async def on_start(self, start: pb.Start) -> pb.StartResult: ...

    async def on_cancel(self, cancel: pb.Cancel) -> pb.CancelResult: ...

    async def on_inspect(self, inspect: pb.Inspect) -> pb.InspectResult: ...

    def observe(self) -> cpb.Observation:
        """The capacity now; owner, instance, routes and observe_time are filled in if empty."""
        ...


@dataclass(frozen=True)
class Backoff:
    """Reconnect delays: exponential from ``initial_s`` up to ``max_s``, each multiplied by a
    random factor in [1 - jitter, 1] so that many runtimes do not reconnect in step."""

    initial_s: float = 0.2
    max_s: float = 15.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def delay(self, failures: int) -> float:
        ceiling = min(self.max_s, self.initial_s * self.multiplier ** max(0, failures - 1))
        return ceiling * (1.0 - self.jitter * random.random())
