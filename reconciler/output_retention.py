"""Output retention: the stored output of attempts that ended longer ago than the retention
period is deleted, a batch at a time (readers then answer ``expired``). Output is not state:
no transition is involved, and the attempt rows keep their byte counts; the delete still goes
through the one write door (``Transitions.delete_output``)."""

from __future__ import annotations

from collections.abc import Callable

from coordinator.service.transitions import Transitions
from kernel.ids import now_ms
from kernel.retention import DAY_MS, Retention

__all__ = ["DAY_MS", "OutputRetention"]


class OutputRetention(Retention):
    def __init__(
        self,
        transitions: Transitions,
        retention_days: int,
        interval_s: float = 600.0,
        batch: int = 5000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        super().__init__(
            "output retention", transitions.delete_output, retention_days, interval_s, batch, clock
        )
