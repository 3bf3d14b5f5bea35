"""Device occupancy merged exactly by runtime task id (seed A §2).

O = runtime active + durable capacity rows whose runtime_task_id the runtime did not report.
A task both sides know counts once; a manual task only the runtime knows and a claim the
runtime has not seen yet both count. Never a sum of two counters, never a max().
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Occupancy:
    limit: int
    runtime_active: int
    durable_rows: int
    merged_task_ids: tuple[str, ...]
    durable_only_task_ids: tuple[str, ...]

    @property
    def occupied(self) -> int:
        return self.runtime_active + len(self.durable_only_task_ids)

    @property
    def free_slots(self) -> int:
        return max(0, self.limit - self.occupied)


def occupancy(
    limit: int, active_task_ids: Iterable[str], durable_task_ids: Iterable[str]
) -> Occupancy:
    """``durable_task_ids``: claimed, starting, running and unknown attempts of this
    owner + runtime instance (unknown is starting/running with a stale sync: it keeps its slot)."""
    active = tuple(dict.fromkeys(active_task_ids))
    durable = tuple(dict.fromkeys(durable_task_ids))
    seen = set(active)
    durable_only = tuple(t for t in durable if t not in seen)
    return Occupancy(
        limit=limit,
        runtime_active=len(active),
        durable_rows=len(durable),
        merged_task_ids=active + durable_only,
        durable_only_task_ids=durable_only,
    )
