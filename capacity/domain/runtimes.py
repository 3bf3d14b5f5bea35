"""The runtimes as the capacity service last saw them: connected or stale, and in whose words.

Pure: the observation store says what each instance last reported and when it arrived; the
durable rows say which claims it holds. Connected means exactly what claims rely on: the
observation is still fresh (``kernel.observation.is_fresh``). A stale instance is not called
gone or dead: truerun only knows that no heartbeat arrived within the TTL.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from capacity.domain.occupancy import Occupancy, occupancy
from kernel.observation import Observation, is_fresh

CONNECTED_DETAIL = "heartbeats arrive within the observation TTL; claims may use it"


@dataclass(frozen=True, slots=True)
class RuntimeView:
    observation: Observation
    occupancy: Occupancy
    connected: bool
    #: Server clock ms since the last observation arrived (never negative).
    age_ms: int
    detail: str
    #: When a newer instance of its lineage replaced it (server clock ms); None when not.
    replaced_at_ms: int | None = None


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def stale_detail(ttl_ms: int) -> str:
    return (
        f"no heartbeat within the observation TTL ({_seconds(ttl_ms)}): disconnected or "
        "silent; claims for it stopped and its attempts keep their states"
    )


def replaced_detail(lineage: str) -> str:
    return (
        f"replaced by a newer instance of lineage {lineage}: its started attempts became "
        "lost; claims for it stopped"
    )


def runtime_view(
    obs: Observation,
    ttl_ms: int,
    durable_task_ids: Iterable[str],
    now_ms: int,
    replaced_at_ms: int | None = None,
) -> RuntimeView:
    """One instance: its occupancy merged as GetOccupancy merges it, connected iff fresh.
    A stale instance that its lineage replaced says so (the recorded fact, not a guess)."""
    connected = is_fresh(obs, ttl_ms, now_ms)
    if connected:
        detail = CONNECTED_DETAIL
    elif replaced_at_ms is not None:
        detail = replaced_detail(obs.lineage or "?")
    else:
        detail = stale_detail(ttl_ms)
    return RuntimeView(
        observation=obs,
        occupancy=occupancy(obs.limit, obs.active_task_ids, durable_task_ids),
        connected=connected,
        age_ms=max(0, now_ms - obs.received_at_ms),
        detail=detail,
        replaced_at_ms=replaced_at_ms,
    )


def listed(
    seen: Sequence[tuple[Observation, int]],
    durable: Mapping[tuple[str, str], Sequence[str]],
    now_ms: int,
    owners: Collection[str] | None,
    replaced: Mapping[tuple[str, str], int] | None = None,
) -> list[RuntimeView]:
    """The views of ``seen`` whose owner is in ``owners`` (None: every owner): connected
    first, then stale, each by owner and instance id. ``replaced``: when each replaced
    instance was replaced, by (owner, instance)."""
    views = [
        runtime_view(
            obs,
            ttl,
            durable.get((obs.owner_id, obs.runtime_instance_id), ()),
            now_ms,
            (replaced or {}).get((obs.owner_id, obs.runtime_instance_id)),
        )
        for obs, ttl in seen
        if owners is None or obs.owner_id in owners
    ]
    return sorted(
        views,
        key=lambda v: (
            not v.connected,
            v.observation.owner_id,
            v.observation.runtime_instance_id,
        ),
    )
