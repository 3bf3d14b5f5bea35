"""Lease expiry (seed A §10): what a silent dispatcher or runtime leaves behind.

- lease expired, no start fence: nothing can have started, so the same attempt row goes
  back to the queue (same attempt_no, retry budget untouched, no new attempt);
- lease expired, fence set: a Start may have reached the runtime, so the attempt becomes
  `unknown` (sync stale) and keeps its capacity; never failed, never re-sent.

With ``no_output_cancel_after_ms`` it also asks a running attempt in sync whose last runtime
event is older than that to cancel (an unknown attempt's silence is its runtime's): the same
durable cancel request a user's CancelRun makes (the dispatcher then sends the runtime
Cancel); the run shows cancelling until the runtime confirms, it is never marked failed here.

Several reconciler replicas split the work: each candidate is taken in its own transaction
that locks its rows (PostgreSQL: FOR UPDATE SKIP LOCKED, so a replica skips what another is
acting on) and applies the action there through the transition service. Correctness never
depends on the split: every action is still a compare-and-set of the domain. Startup never
resets anything in bulk: it is the same scan.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from coordinator.domain import commands as c
from coordinator.domain import staleness
from coordinator.domain.model import Actor, Attempt
from coordinator.domain.states import ActorType
from coordinator.service.recovery import lose_in
from coordinator.service.transitions import DoorTx, Result, Transitions
from coordinator.store.base import Scan
from kernel.errors import DomainError
from kernel.ids import now_ms
from kernel.loops import every

log = logging.getLogger(__name__)

ACTOR = Actor(ActorType.RECONCILER, "leases")
NO_OUTPUT_ACTOR = Actor(ActorType.RECONCILER, "no_output")

Action = Callable[[DoorTx, Attempt, list[Result]], Awaitable[str | None]]


class LeaseReconciler:
    def __init__(
        self,
        transitions: Transitions,
        interval_s: float = 2.0,
        clock: Callable[[], int] = now_ms,
        on_action: Callable[[str], None] | None = None,
        lost_after_ms: int = 0,
        max_recoveries: int = 5,
        no_output_cancel_after_ms: int = 0,
    ) -> None:
        """``lost_after_ms``: how long a runtime may stay silent before its unknown attempts
        are declared lost by policy (0: never; a person decides). ``max_recoveries``: how
        often one run may be recovered before the next recovery dead-letters it (0: no
        limit). ``no_output_cancel_after_ms``: how long a running attempt may go without a
        runtime event before a cancel is requested (0: never)."""
        self._max_recoveries = max_recoveries
        self._transitions = transitions
        self._lost_after_ms = lost_after_ms
        self._no_output_ms = no_output_cancel_after_ms
        self._on_action = on_action
        self._interval_s = interval_s
        self._clock = clock

    async def run_once(self, limit: int = 200) -> dict[str, int]:
        """One scan; returns how many attempts were requeued and marked unknown (and, with
        a lost_after policy, declared lost; with a no-output threshold, asked to cancel)."""
        now = self._clock()
        counts = {"requeued": 0, "unknown": 0}
        await self._scan(Scan.EXPIRED_LEASES, now, limit, self._settle, counts)
        if self._lost_after_ms > 0:
            counts["lost"] = 0
            mark = now - self._lost_after_ms
            await self._scan(Scan.SILENT_UNKNOWNS, mark, limit, self._declare_lost, counts)
        if self._no_output_ms > 0:
            counts["cancelled"] = 0
            mark = now - self._no_output_ms
            await self._scan(Scan.QUIET_RUNNING, mark, limit, self._cancel_quiet, counts)
        return counts

    async def _scan(
        self, scan: Scan, mark_ms: int, limit: int, act: Action, counts: dict[str, int]
    ) -> None:
        """Each candidate in its own transaction holding its rows; one that could not be
        acted on (it moved on) is not taken again in this scan."""
        tried: list[str] = []
        while len(tried) < limit:
            results: list[Result] = []
            try:
                async with self._transitions.transaction([]) as tx:
                    found = await tx.lock_scan(scan, mark_ms, tried, 1)
                    if not found:
                        return
                    attempt = found[0]
                    tried.append(attempt.id)
                    outcome = await act(tx, attempt, results)
            except DomainError as error:  # it moved on meanwhile (fenced, finished, renewed)
                log.info("attempt %s left as is (%s): %s", tried[-1], scan, error.message)
                outcome, results = None, []
            self._transitions.published(results)
            if outcome:
                counts[outcome] += 1
            if self._on_action is not None:
                self._on_action(outcome or "moved_on")

    async def _declare_lost(self, tx: DoorTx, attempt: Attempt, results: list[Result]) -> str:
        """The lost_after policy: silent that long, the attempt is lost by policy (the reason
        says so); an idempotent run then gets a new attempt, any other waits for a person."""
        reason = f"lost_after_policy: runtime silent for over {self._lost_after_ms} ms"
        command = c.MarkLost(attempt.run_id, ACTOR, reason=reason)
        results += await lose_in(self._transitions, tx, command, ACTOR, self._max_recoveries)
        return "lost"

    async def _cancel_quiet(self, tx: DoorTx, attempt: Attempt, results: list[Result]) -> str:
        """No runtime event for too long: the durable cancel request (as CancelRun makes it);
        the dispatcher sends the runtime Cancel, the runtime's answer finishes the run."""
        reason = f"no output for {self._no_output_ms} ms"
        command = c.RequestCancel(attempt.run_id, NO_OUTPUT_ACTOR, reason=reason)
        results.append(await self._transitions.execute_in(tx, command))
        return "cancelled"

    async def _settle(self, tx: DoorTx, attempt: Attempt, results: list[Result]) -> str:
        if attempt.fenced:
            command: c.RunCommand = c.DispatchUnknown(
                attempt.run_id,
                ACTOR,
                reason=staleness.LEASE_LAPSED,
                explanation=staleness.lease_lapsed(attempt),
                attempt_id=attempt.id,
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
        results.append(await self._transitions.execute_in(tx, command))
        return outcome

    async def serve(self) -> None:
        await every(self._interval_s, self.run_once, "lease scan")
