"""Capacity test helpers: wiring over a database URL, observations, claims and their follow-ups.

``open_capacity(url)`` opens the store named by ``url`` and wires the coordinator and the
capacity services exactly as ``services.bootstrap`` does, over an in-memory observation store
(or the one given); ``clock`` injects the capacity services' clock (observation receive time
and freshness), never the transition service's. Everything opened is closed on exit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg

from capacity.observations.base import ObservationStore
from capacity.observations.memory import MemoryObservationStore
from capacity.service.agents import AgentService
from capacity.service.claims import Claimed, ClaimOutcome, ClaimService
from capacity.service.reports import ObservationService
from coordinator.domain import commands as c
from coordinator.domain.model import Attempt
from coordinator.service.transitions import Transitions
from kernel.ids import now_ms
from kernel.observation import Observation, Route
from services.bootstrap import Capacity, Coordinator, capacity_sql, coordinator, open_store
from tests.support.factories import RUNTIME, SCHEDULER

ROUTE_KIND = "local"
LEASE_TTL_MS = 30_000
#: Long enough that no observation goes stale during a test that does not mean it to.
LONG_TTL_MS = 600_000


class ManualClock:
    """A clock (ms) that moves only when told to."""

    def __init__(self, start_ms: int | None = None) -> None:
        self.now_ms = now_ms() if start_ms is None else start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms


def wire(
    app: Coordinator,
    observations: ObservationStore,
    ttl_ms: int = LONG_TTL_MS,
    clock: Callable[[], int] | None = None,
) -> Capacity:
    """``services.bootstrap.capacity``, with an optional clock for the capacity services."""
    sql = capacity_sql(app.store)
    if clock is None:
        return Capacity(
            observations,
            ClaimService(sql, observations, app.transitions),
            ObservationService(observations, sql, ttl_ms),
            AgentService(sql),
        )
    return Capacity(
        observations,
        ClaimService(sql, observations, app.transitions, clock),
        ObservationService(observations, sql, ttl_ms, clock),
        AgentService(sql, clock),
    )


@asynccontextmanager
async def open_capacity(
    database_url: str,
    *,
    ttl_ms: int = LONG_TTL_MS,
    clock: Callable[[], int] | None = None,
    observations: ObservationStore | None = None,
) -> AsyncIterator[tuple[Coordinator, Capacity]]:
    """(app, cap) over ``database_url`` (already migrated); closes the store and the
    observation store (a MemoryObservationStore unless one is given) on exit."""
    store = await open_store(database_url)
    obs_store: ObservationStore = observations or MemoryObservationStore()
    try:
        app = coordinator(store)
        yield app, wire(app, obs_store, ttl_ms, clock)
    finally:
        await obs_store.close()
        await store.close()


def observation(
    owner: str,
    instance: str,
    limit: int,
    active_task_ids: Iterable[str] = (),
    routes: Sequence[str] = ("dev-1",),
    labels: Sequence[str] = (),
    received_at_ms: int = 0,
) -> Observation:
    """A consistent observation: ``active`` is the number of the (unique) active task ids."""
    active = tuple(active_task_ids)
    return Observation(
        owner_id=owner,
        runtime_instance_id=instance,
        routes=tuple(Route(device, ROUTE_KIND) for device in routes),
        limit=limit,
        active=len(active),
        active_task_ids=active,
        queued=0,
        labels=tuple(labels),
        observed_at_ms=None,
        received_at_ms=received_at_ms,
    )


async def observe(
    reports: ObservationService,
    owner: str,
    instance: str,
    limit: int,
    active_task_ids: Iterable[str] = (),
    routes: Sequence[str] = ("dev-1",),
    labels: Sequence[str] = (),
) -> Observation:
    """Report a heartbeat's observation through the service (validated, server-stamped)."""
    return await reports.report(
        observation(owner, instance, limit, active_task_ids, routes, labels)
    )


async def claim(
    cap: Capacity, owner: str, instance: str, device: str = "dev-1", max_claims: int = 1
) -> ClaimOutcome:
    return await cap.claims.claim(owner, instance, device, max_claims, LEASE_TTL_MS, SCHEDULER)


async def release(transitions: Transitions, claimed: Claimed) -> None:
    """The provably safe pre-fence release: the same attempt row goes back to the queue."""
    lease = claimed.attempt.lease_token or ""
    await transitions.execute(c.ReleaseBeforeFence(claimed.run.id, SCHEDULER, lease_token=lease))


async def fence(transitions: Transitions, claimed: Claimed) -> Attempt:
    """Persist the start fence (a Start may reach the runtime from now on)."""
    lease = claimed.attempt.lease_token or ""
    result = await transitions.execute(
        c.StartFence(claimed.run.id, SCHEDULER, callback_token_hash="h", lease_token=lease)
    )
    assert result.attempt is not None
    return result.attempt


async def finish(
    transitions: Transitions,
    claimed: Claimed,
    outcome: c.RuntimeOutcome = c.RuntimeOutcome.SUCCEEDED,
) -> Attempt:
    """Fence, then the runtime's confirmed terminal result: the slot is free again."""
    attempt = await fence(transitions, claimed)
    result = await transitions.execute(
        c.RuntimeResult(attempt.run_id, attempt.id, attempt.runtime_task_id, 1, RUNTIME, outcome)
    )
    assert result.attempt is not None and result.attempt.status.terminal
    return result.attempt


def git_workspace(path: Path) -> str:
    """A directory that is a git work tree (it has a .git directory)."""
    (path / ".git").mkdir(parents=True, exist_ok=True)
    return str(path)


async def rows(database_url: str, sql: str) -> list[dict[str, Any]]:
    """A parameterless query, read straight from the database (not through the store)."""
    if database_url.startswith("sqlite:///"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        conn.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in conn.execute(sql).fetchall()]
        finally:
            conn.close()
    pg = await asyncpg.connect(database_url)
    try:
        return [dict(row) for row in await pg.fetch(sql)]
    finally:
        await pg.close()


LIVE_SQL = "status IN ('claimed', 'starting', 'running')"


async def live_attempts(database_url: str) -> list[dict[str, Any]]:
    """Every attempt that holds a slot (claimed, starting, running; unknown included)."""
    return await rows(
        database_url,
        "SELECT id, run_id, agent_id, owner_id, runtime_instance_id, runtime_device_id, "
        f"runtime_task_id, status, sync_state FROM attempts WHERE {LIVE_SQL} ORDER BY id",
    )
