"""The observation store contract: the latest capacity observation per runtime instance.

Redis (or its in-memory twin) holds observations only; it is never the guard against
over-commit. A lost observation stops claims for its instance; it never releases anything.
"""

from __future__ import annotations

from typing import Final, Protocol

from kernel.observation import Observation

#: How long an instance stays listed by ``recent`` after its last observation arrived, past
#: the observation's own TTL: long enough to see that a runtime went away, and when.
SEEN_RETENTION_MS: Final = 600_000


class ObservationStore(Protocol):
    """Latest observation per ``(owner_id, runtime_instance_id)``, kept for a TTL."""

    async def put(self, obs: Observation, ttl_ms: int) -> None:
        """Store ``obs`` (validated first) for ``ttl_ms``, replacing the previous one.

        Raises ObservationRejected for an invalid observation and ValueError for a
        non-positive ``ttl_ms``; nothing is stored then.
        """
        ...

    async def get(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> Observation | None:
        """The stored observation of the instance if it still counts at ``now_ms``, else None.

        None when nothing is stored, when the entry expired by its TTL, when the stored
        value is corrupt or belongs to another owner/instance, or when
        ``now_ms - received_at_ms > ttl_ms``: the stored receive time is checked as well,
        so a restored dump or a store clock jump cannot revive an old observation.
        """
        ...

    async def recent(self, now_ms: int) -> list[tuple[Observation, int]]:
        """Every instance's last observation with its TTL, ``(observation, ttl_ms)``, that
        arrived within its TTL plus the store's seen retention before ``now_ms``: the
        connected instances (fresh, as ``get`` answers) and the recently silent ones. Only
        for display: claims read ``get``. Corrupt values are left out."""
        ...

    async def close(self) -> None:
        """Release connections. The store is unusable afterwards."""
        ...
