"""What the agent and a task's runner share: the phases a runner moves through, and what
the agent gives each runner (its outbox, timings and the hooks it calls back)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from truerun_runtime import Outbox

from .output import OutputTailer
from .tasks import TaskPaths, TaskRecord


class Phase(enum.Enum):
    QUEUED = "queued"  # accepted, waiting for a local slot
    LAUNCHING = "launching"  # supervisor started, command not yet confirmed running
    RUNNING = "running"  # the command runs (or ran; its status is not read yet)
    FINISHED = "finished"  # terminal evidence written
    LOST = "lost"  # nothing proves the command alive, and no status will come


OCCUPYING = frozenset({Phase.LAUNCHING, Phase.RUNNING})


@dataclass(frozen=True)
class RunnerContext:
    outbox: Outbox
    poll_s: float
    default_grace_ms: int
    tailer: Callable[[TaskPaths, int], OutputTailer]
    unreachable_ms: Callable[[], int]
    on_change: Callable[[], None]
    spawn_supervisor: Callable[[TaskRecord, TaskPaths], int]
    launch_timeout_s: float = 30.0
