"""Runtime observations in, occupancy out."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from capacity.domain.occupancy import Occupancy, occupancy
from capacity.domain.runtimes import RuntimeView, listed
from capacity.observations.base import ObservationStore
from capacity.store.base import CapacitySql
from kernel.ids import now_ms
from kernel.observation import Observation, is_fresh, validate

DEFAULT_OBSERVATION_TTL_MS = 15_000


@dataclass(frozen=True, slots=True)
class OccupancyView:
    occupancy: Occupancy
    fresh: bool
    age_ms: int | None


class ObservationService:
    def __init__(
        self,
        observations: ObservationStore,
        sql: CapacitySql,
        ttl_ms: int = DEFAULT_OBSERVATION_TTL_MS,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._observations = observations
        self._sql = sql
        self.ttl_ms = ttl_ms
        self._clock = clock

    async def report(self, observation: Observation) -> Observation:
        """Validate and store, stamped with this server's receive time (freshness is judged
        by it, never by the runtime's clock)."""
        stamped = replace(observation, received_at_ms=self._clock())
        validate(stamped)
        await self._observations.put(stamped, self.ttl_ms)
        return stamped

    async def occupancy(self, owner: str, instance: str) -> OccupancyView:
        now = self._clock()
        observation = await self._observations.get(owner, instance, now)
        durable = await self._sql.durable_task_ids(None, owner, instance)
        if observation is None:
            # Without a fresh observation nothing is free: D is unknown, not zero and not a default.
            return OccupancyView(occupancy(0, (), durable), fresh=False, age_ms=None)
        return OccupancyView(
            occupancy(observation.limit, observation.active_task_ids, durable),
            fresh=True,
            age_ms=now - observation.received_at_ms,
        )

    async def has_runs_in(self, owner: str, projects: Collection[str]) -> bool:
        """Whether ``owner`` has a run in one of ``projects`` (whose runtimes a token of
        those projects may read)."""
        return bool(await self._sql.owners_with_runs_in([owner], sorted(projects)))

    async def runtimes(
        self, projects: Collection[str] | None, owner: str = ""
    ) -> list[RuntimeView]:
        """The instances seen within their TTL plus the store's retention: of every owner
        when ``projects`` is None (a token of every project), else of the owners with a run
        in one of ``projects``; only ``owner``'s when given. Read from the observation
        store, not from this process's streams, so every replica lists the same set."""
        now = self._clock()
        seen = [
            (obs, ttl)
            for obs, ttl in await self._observations.recent(now)
            if not owner or obs.owner_id == owner
        ]
        owners: set[str] | None = None
        if projects is not None:
            candidates = sorted({obs.owner_id for obs, _ in seen})
            owners = await self._sql.owners_with_runs_in(candidates, sorted(projects))
        shown = {
            (obs.owner_id, obs.runtime_instance_id)
            for obs, _ in seen
            if owners is None or obs.owner_id in owners
        }
        durable = {key: await self._sql.durable_task_ids(None, *key) for key in sorted(shown)}
        # Only a stale instance with a lineage can have been replaced (a live one never is).
        maybe = [
            (obs.owner_id, obs.runtime_instance_id)
            for obs, ttl in seen
            if obs.lineage
            and not is_fresh(obs, ttl, now)
            and (obs.owner_id, obs.runtime_instance_id) in shown
        ]
        replaced = await self._sql.replaced_instances(maybe) if maybe else {}
        return listed(seen, durable, now, owners, replaced)
