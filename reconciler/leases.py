"""Lease expiry (seed A §10): what a silent dispatcher or runtime leaves behind.

- lease expired, no start fence: nothing can have started, so the same attempt row goes
  back to the queue (same attempt_no, retry budget untouched, no new attempt);
- lease expired, fence set: a Start may have reached the runtime, so the attempt becomes
  `unknown` (sync stale) and keeps its capacity; never failed, never re-sent.

Every action is a compare-and-set through the transition service, so several reconciler
replicas can scan at once: one wins, the others find the state moved on. Startup never
resets anything in bulk: it is the same scan.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from coordinator.domain import commands as c
from coordinator.domain.errors import DomainError
from coordinator.domain.model import Actor, Attempt
from coordinator.domain.states import ActorType
from coordinator.service.transitions import Transitions
from services.ids import now_ms

log = logging.getLogger(__name__)

ACTOR = Actor(ActorType.RECONCILER, "leases")


class LeaseReconciler:
    def __init__(
        self,
        transitions: Transitions,
        interval_s: float = 2.0,
        clock: Callable[[], int] = now_ms,
        on_action: Callable[[str], None] | None = None,
        lost_after_ms: int = 0,
        max_recoveries: int = 5,
    ) -> None:
        """``lost_after_ms``: how long a runtime may stay silent before its unknown attempts
        are declared lost by policy (0: never; a person decides). ``max_recoveries``: how
        often one run may be recovered before the next recovery dead-letters it (0: no
        limit)."""
        self._max_recoveries = max_recoveries
        self._transitions = transitions
        self._lost_after_ms = lost_after_ms
        self._on_action = on_action
        self._interval_s = interval_s
        self._clock = clock

    async def run_once(self, limit: int = 200) -> dict[str, int]:
        """One scan; returns how many attempts were requeued and marked unknown (and, with
        a lost_after policy, declared lost)."""
        counts = {"requeued": 0, "unknown": 0}
        for attempt in await self._transitions.store.expired_leases(self._clock(), limit):
            outcome = await self._settle(attempt)
            if outcome:
                counts[outcome] += 1
            if self._on_action is not None:
                self._on_action(outcome or "moved_on")
        if self._lost_after_ms > 0:
            counts["lost"] = await self._declare_lost(limit)
        return counts

    async def _declare_lost(self, limit: int) -> int:
        """The lost_after policy: silent that long, the attempt is lost by policy (the reason
        says so); an idempotent run then gets a new attempt, any other waits for a person."""
        store = self._transitions.store
        lost = 0
        for attempt in await store.silent_unknowns(self._clock() - self._lost_after_ms, limit):
            reason = f"lost_after_policy: runtime silent for over {self._lost_after_ms} ms"
            try:
                result = await self._transitions.execute(
                    c.MarkLost(attempt.run_id, ACTOR, reason=reason)
                )
                lost += 1
                if result.run.idempotent and result.run.status.value == "lost":
                    retry = c.RetryAttempt(
                        attempt.run_id,
                        ACTOR,
                        recovery=True,
                        max_recoveries=self._max_recoveries,
                    )
                    await self._transitions.execute(retry)
            except DomainError as error:
                log.info("attempt %s not declared lost: %s", attempt.id, error.message)
        return lost

    async def _settle(self, attempt: Attempt) -> str | None:
        if attempt.fenced:
            command: c.RunCommand = c.DispatchUnknown(
                attempt.run_id, ACTOR, reason="lease_expired_after_start"
            )
            outcome = "unknown"
        else:
            command = c.ReleaseBeforeFence(
                attempt.run_id,
                ACTOR,
                reason="lease_expired_before_start",
                lease_token=attempt.lease_token or "",
                recovery=True,
                max_recoveries=self._max_recoveries,
            )
            outcome = "requeued"
        try:
            await self._transitions.execute(command)
        except DomainError as error:  # it moved on meanwhile (fenced, finished, renewed)
            log.info("attempt %s left as is: %s", attempt.id, error.message)
            return None
        return outcome

    async def serve(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # a database hiccup: next round, never die
                log.exception("lease scan failed")
            await asyncio.sleep(self._interval_s)
