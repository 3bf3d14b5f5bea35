"""In-memory twin of the Redis observation store (tests and the embedded dev mode).

It stores the same encoded JSON as Redis and decodes it on every read, so both stores
accept, reject and expire exactly alike. It reads no clock of its own: an entry's TTL runs
from its ``received_at_ms`` and is judged against the ``now_ms`` given to ``get``.
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity.observations.base import SEEN_RETENTION_MS
from kernel.observation import (
    CorruptObservation,
    Observation,
    decode,
    encode,
    is_fresh,
    validate,
)


@dataclass(frozen=True, slots=True)
class _Entry:
    raw: str | bytes
    #: The twin of the Redis key expiry (server clock, ms); None = never expires.
    expire_at_ms: int | None


class MemoryObservationStore:
    """``ObservationStore`` in a dict; same semantics as RedisObservationStore."""

    def __init__(self, seen_retention_ms: int = SEEN_RETENTION_MS) -> None:
        self._entries: dict[tuple[str, str], _Entry] = {}
        #: The twin of Redis' seen keys: the last observation, kept past its TTL.
        self._seen: dict[tuple[str, str], _Entry] = {}
        self._seen_retention_ms = seen_retention_ms

    async def put(self, obs: Observation, ttl_ms: int) -> None:
        validate(obs)
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be positive, got {ttl_ms}")
        key = (obs.owner_id, obs.runtime_instance_id)
        raw = encode(obs, ttl_ms)
        self._entries[key] = _Entry(raw, obs.received_at_ms + ttl_ms)
        self._seen[key] = _Entry(raw, obs.received_at_ms + ttl_ms + self._seen_retention_ms)

    async def get(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> Observation | None:
        key = (owner_id, runtime_instance_id)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expire_at_ms is not None and now_ms > entry.expire_at_ms:
            del self._entries[key]
            return None
        try:
            obs, ttl_ms = decode(entry.raw)
        except CorruptObservation:
            return None
        if (obs.owner_id, obs.runtime_instance_id) != key:
            return None
        if not is_fresh(obs, ttl_ms, now_ms):
            return None
        return obs

    async def recent(self, now_ms: int) -> list[tuple[Observation, int]]:
        found: list[tuple[Observation, int]] = []
        for key, entry in list(self._seen.items()):
            if entry.expire_at_ms is not None and now_ms > entry.expire_at_ms:
                del self._seen[key]
                continue
            try:
                obs, ttl_ms = decode(entry.raw)
            except CorruptObservation:
                continue
            if (obs.owner_id, obs.runtime_instance_id) == key:
                found.append((obs, ttl_ms))
        return found

    async def put_raw(
        self,
        owner_id: str,
        runtime_instance_id: str,
        raw: str | bytes,
        expire_at_ms: int | None = None,
    ) -> None:
        """Store ``raw`` as is under the instance's key (the twin of a direct Redis SET).

        For tests that simulate a restored dump or a corrupt value; never validated here.
        """
        self._entries[(owner_id, runtime_instance_id)] = _Entry(raw, expire_at_ms)

    def clear(self) -> None:
        """Forget everything (the twin of FLUSHDB, or of a restart)."""
        self._entries.clear()
        self._seen.clear()

    async def close(self) -> None:
        self._entries.clear()
        self._seen.clear()
