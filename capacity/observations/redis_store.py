"""Observations in Redis: one key per capacity domain, expiring with the observation's TTL.

Key: ``truerun:obs:{owner}:{instance}`` where both ids are percent-encoded (every byte but
letters, digits and ``_.-~``), so a ``:`` inside an id can never make two domains share a
key (and ``{``/``}`` never form a cluster hash tag). Value: the compact JSON of
``model.encode``, including ``ttl_ms`` and ``received_at_ms``, written with
``SET key value PX ttl_ms``. The same value also goes to the instance's seen key,
``{prefix}~seen:{owner}:{instance}``, which outlives the TTL by the seen retention: it lists
the instances that went silent recently (``recent``; display only, claims never read it).

``get`` decodes and validates the value again and checks the stored receive time against
the caller's clock, so a restored dump or a Redis clock jump cannot revive an old
observation. A corrupt value (or a key of another type) reads as missing.

Every call here is idempotent (a SET of the same value, reads), so one that finds its
pooled connection broken (``kernel.outages.is_broken_connection``: the network reset it
while it sat idle, which the client notices only when it next writes) is sent once more on
a new connection, the idle ones dropped first; without that the first call after every
reset failed. Other connection failures, and a second one, propagate: the caller decides,
and a missing answer stops claims anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar
from urllib.parse import quote

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from capacity.observations.base import SEEN_RETENTION_MS
from kernel.observation import (
    CorruptObservation,
    Observation,
    decode,
    encode,
    is_fresh,
    validate,
)
from kernel.outages import is_broken_connection

log = logging.getLogger(__name__)

DEFAULT_KEY_PREFIX: Final = "truerun:obs"
#: How many seen keys one MGET reads.
_BATCH: Final = 200

T = TypeVar("T")


async def _once_more_if_broken(client: Redis, call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, and once more if its connection was found broken (never after a
    timeout). The idle pooled connections went through the same network, so they are
    dropped before the retry, which then connects anew instead of drawing another broken one."""
    try:
        return await call()
    except Exception as error:
        if not is_broken_connection(error):
            raise
        log.info("redis connection found broken (%s); the call is sent once more", error)
        await client.connection_pool.disconnect(inuse_connections=False)
        return await call()


def observation_key(
    owner_id: str, runtime_instance_id: str, prefix: str = DEFAULT_KEY_PREFIX
) -> str:
    """The Redis key of one capacity domain (ids percent-encoded, injective)."""
    return f"{prefix}:{quote(owner_id, safe='')}:{quote(runtime_instance_id, safe='')}"


class RedisObservationStore:
    """``ObservationStore`` on Redis. Create with ``await RedisObservationStore.connect(url)``."""

    def __init__(
        self,
        client: Redis,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        seen_retention_ms: int = SEEN_RETENTION_MS,
    ) -> None:
        self._client = client
        self._prefix = key_prefix
        # '~' right after the prefix: never the ':' every observation key has there
        self._seen_prefix = f"{key_prefix}~seen"
        self._seen_retention_ms = seen_retention_ms

    @classmethod
    async def connect(
        cls, url: str, *, key_prefix: str = DEFAULT_KEY_PREFIX
    ) -> RedisObservationStore:
        """Connect to ``url`` (e.g. ``redis://127.0.0.1:6379/0``) and ping it once."""
        client = Redis.from_url(url, decode_responses=False)
        try:
            await client.ping()
        except BaseException:
            await client.aclose()
            raise
        return cls(client, key_prefix)

    def key(self, owner_id: str, runtime_instance_id: str) -> str:
        """The key this store uses for one capacity domain."""
        return observation_key(owner_id, runtime_instance_id, self._prefix)

    async def put(self, obs: Observation, ttl_ms: int) -> None:
        validate(obs)
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be positive, got {ttl_ms}")
        key = self.key(obs.owner_id, obs.runtime_instance_id)
        seen = observation_key(obs.owner_id, obs.runtime_instance_id, self._seen_prefix)
        raw = encode(obs, ttl_ms)

        async def write() -> None:
            async with self._client.pipeline(transaction=True) as both:
                both.set(key, raw, px=ttl_ms)
                both.set(seen, raw, px=ttl_ms + self._seen_retention_ms)
                await both.execute()

        await _once_more_if_broken(self._client, write)

    async def get(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> Observation | None:
        key = self.key(owner_id, runtime_instance_id)
        try:
            raw = await _once_more_if_broken(self._client, lambda: self._client.get(key))
        except ResponseError as exc:  # WRONGTYPE: something else sits on our key
            log.warning("observation key %s unreadable, treated as missing: %s", key, exc)
            return None
        if raw is None:
            return None
        if not isinstance(raw, bytes | str):
            log.warning("observation key %s holds %s, treated as missing", key, type(raw))
            return None
        try:
            obs, ttl_ms = decode(raw)
        except CorruptObservation as exc:
            log.warning("observation key %s corrupt, treated as missing: %s", key, exc)
            return None
        if (obs.owner_id, obs.runtime_instance_id) != (owner_id, runtime_instance_id):
            log.warning("observation key %s holds another instance's observation", key)
            return None
        if not is_fresh(obs, ttl_ms, now_ms):
            return None
        return obs

    async def recent(self, now_ms: int) -> list[tuple[Observation, int]]:
        return await _once_more_if_broken(self._client, lambda: self._recent(now_ms))

    async def _recent(self, now_ms: int) -> list[tuple[Observation, int]]:
        keys = [key async for key in self._client.scan_iter(match=f"{self._seen_prefix}:*")]
        found: list[tuple[Observation, int]] = []
        for start in range(0, len(keys), _BATCH):
            chunk = keys[start : start + _BATCH]
            for key, raw in zip(chunk, await self._client.mget(chunk), strict=True):
                if not isinstance(raw, bytes | str):
                    continue  # expired between SCAN and MGET
                try:
                    obs, ttl_ms = decode(raw)
                except CorruptObservation as exc:
                    log.warning("seen key %r corrupt, left out: %s", key, exc)
                    continue
                name = observation_key(obs.owner_id, obs.runtime_instance_id, self._seen_prefix)
                if name.encode() != key and name != key:
                    continue  # another instance's value under this key
                if now_ms - obs.received_at_ms <= ttl_ms + self._seen_retention_ms:
                    found.append((obs, ttl_ms))
        return found

    async def close(self) -> None:
        await self._client.aclose()
