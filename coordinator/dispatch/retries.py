"""Automatic retry after a runtime-proven failure: a run in retry_wait gets a new attempt
once its backoff has passed (the failed attempt stays as it is). Safe with many replicas:
each retry is a compare-and-set through the transition service, so only one wins."""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service.transitions import Transitions
from kernel.errors import DomainError
from kernel.ids import now_ms
from kernel.loops import every

log = logging.getLogger(__name__)

ACTOR = Actor(ActorType.SCHEDULER, "retry-scheduler")


class RetryScheduler:
    def __init__(
        self,
        transitions: Transitions,
        backoff_ms: int = 2_000,
        interval_s: float = 1.0,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._transitions = transitions
        self._backoff_ms = backoff_ms
        self._interval_s = interval_s
        self._clock = clock

    async def run_once(self, limit: int = 100) -> int:
        """Requeue the runs whose backoff has passed; returns how many were requeued."""
        due = await self._transitions.reader.due_retries(self._clock() - self._backoff_ms, limit)
        requeued = 0
        for run_id in due:
            try:
                await self._transitions.execute(c.RetryAttempt(run_id, ACTOR))
                requeued += 1
            except DomainError as error:  # cancelled meanwhile, or another replica won
                log.info("run %s not retried: %s", run_id, error.message)
        return requeued

    async def serve(self) -> None:
        await every(self._interval_s, self.run_once, "retry scan")
