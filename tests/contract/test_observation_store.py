"""One contract for every ObservationStore: the in-memory twin and Redis.

The Redis variant runs against a dedicated logical database (TRUERUN_TEST_REDIS_URL,
default db 15 on 127.0.0.1), flushed before and after each test. It never skips: an
unreachable Redis fails the test, because CI requires it to run for real.

Neither store reads a clock: ``get`` judges freshness with the ``now_ms`` it is given, so
the times below are fixed numbers. Only the Redis key expiry runs on Redis' own clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

import pytest
from redis.asyncio import Redis

from capacity.observations import (
    MemoryObservationStore,
    Observation,
    ObservationRejected,
    ObservationStore,
    RedisObservationStore,
    Route,
    encode,
)
from capacity.observations.base import SEEN_RETENTION_MS
from tests.support.databases import redis_test_url

REDIS_URL = redis_test_url()
#: Server clock (ms) at which the sample observations arrive.
T0 = 1_700_000_000_000
#: A TTL long enough that no key expires during a test.
LONG_TTL_MS = 600_000


def observation(**changes: Any) -> Observation:
    base = Observation(
        owner_id="owner-1",
        runtime_instance_id="inst-a",
        routes=(Route("dev-local", "local"), Route("dev-app", "app")),
        limit=4,
        active=2,
        active_task_ids=("task-1", "task-2"),
        queued=3,
        labels=("gpu", "linux"),
        observed_at_ms=T0 - 7,
        received_at_ms=T0,
    )
    return dataclasses.replace(base, **changes)


class Backdoor(Protocol):
    """What a test needs beyond the store's API, per store kind."""

    async def write_raw(self, owner_id: str, instance_id: str, raw: str | bytes) -> None:
        """Write ``raw`` as the instance's stored value, with a key that outlives the test."""
        ...

    async def flush(self) -> None:
        """Lose everything (FLUSHDB on the test database)."""
        ...

    async def after_key_expiry(self, obs: Observation, ttl_ms: int) -> int:
        """Wait until the stored key of ``obs`` expired; the ``now_ms`` to ask with then."""
        ...


class MemoryBackdoor:
    def __init__(self, store: MemoryObservationStore) -> None:
        self._store = store

    async def write_raw(self, owner_id: str, instance_id: str, raw: str | bytes) -> None:
        await self._store.put_raw(owner_id, instance_id, raw)

    async def flush(self) -> None:
        self._store.clear()

    async def after_key_expiry(self, obs: Observation, ttl_ms: int) -> int:
        # The twin's key expiry runs on the caller's clock, from the receive time.
        return obs.received_at_ms + ttl_ms + 1


class RedisBackdoor:
    def __init__(self, client: Redis, store: RedisObservationStore) -> None:
        self._client = client
        self._store = store

    async def write_raw(self, owner_id: str, instance_id: str, raw: str | bytes) -> None:
        await self._client.set(self._store.key(owner_id, instance_id), raw, px=LONG_TTL_MS)

    async def flush(self) -> None:
        await self._client.flushdb()

    async def after_key_expiry(self, obs: Observation, ttl_ms: int) -> int:
        key = self._store.key(obs.owner_id, obs.runtime_instance_id)
        deadline = asyncio.get_running_loop().time() + 5.0 + ttl_ms / 1000
        while await self._client.exists(key):
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(f"Redis did not expire {key} within its PX of {ttl_ms} ms")
            await asyncio.sleep(0.01)
        # Still inside the receive-time window: only the key expiry can explain a None.
        return obs.received_at_ms


@dataclasses.dataclass
class Harness:
    store: ObservationStore
    backdoor: Backdoor


async def _redis_client() -> Redis:
    connection = Redis.from_url(REDIS_URL)  # untyped; ping() is typed bool | Awaitable
    try:
        await connection.ping()
    except Exception as exc:  # refused, timed out, auth: all mean the same here
        await connection.aclose()
        pytest.fail(
            f"Redis is required but unreachable at {REDIS_URL} "
            f"(set TRUERUN_TEST_REDIS_URL): {exc!r}",
            pytrace=False,
        )
    client: Redis = connection
    return client


@pytest.fixture
async def redis_client() -> AsyncIterator[Redis]:
    """A client of the dedicated test database, flushed before and after the test."""
    client = await _redis_client()
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "memory":
        memory = MemoryObservationStore()
        yield Harness(memory, MemoryBackdoor(memory))
        await memory.close()
        return
    client = await _redis_client()
    await client.flushdb()
    store = await RedisObservationStore.connect(REDIS_URL)
    yield Harness(store, RedisBackdoor(client, store))
    await store.close()
    await client.flushdb()
    await client.aclose()


@pytest.fixture
def observation_store(harness: Harness) -> ObservationStore:
    return harness.store


@pytest.fixture
def backdoor(harness: Harness) -> Backdoor:
    return harness.backdoor


async def test_put_get_round_trip(observation_store: ObservationStore) -> None:
    obs = observation()
    await observation_store.put(obs, LONG_TTL_MS)
    assert await observation_store.get("owner-1", "inst-a", T0) == obs
    assert await observation_store.get("owner-1", "inst-a", T0 + 1_000) == obs


async def test_round_trip_of_an_idle_runtime_without_its_own_clock(
    observation_store: ObservationStore,
) -> None:
    obs = observation(active=0, active_task_ids=(), queued=0, labels=(), observed_at_ms=None)
    await observation_store.put(obs, LONG_TTL_MS)
    assert await observation_store.get("owner-1", "inst-a", T0) == obs


async def test_put_replaces_the_previous_observation(observation_store: ObservationStore) -> None:
    await observation_store.put(observation(), LONG_TTL_MS)
    newer = observation(active=1, active_task_ids=("task-9",), received_at_ms=T0 + 500)
    await observation_store.put(newer, LONG_TTL_MS)
    assert await observation_store.get("owner-1", "inst-a", T0 + 500) == newer


async def test_missing_is_none(observation_store: ObservationStore) -> None:
    assert await observation_store.get("owner-1", "inst-a", T0) is None


async def test_expired_by_key_ttl_is_none(
    observation_store: ObservationStore, backdoor: Backdoor
) -> None:
    obs = observation()
    await observation_store.put(obs, 50)
    now_ms = await backdoor.after_key_expiry(obs, 50)
    assert await observation_store.get("owner-1", "inst-a", now_ms) is None


async def test_freshness_counts_from_the_stored_receive_time(
    observation_store: ObservationStore,
) -> None:
    # The key outlives the test; only the stored received_at_ms + ttl_ms decides.
    obs = observation()
    await observation_store.put(obs, LONG_TTL_MS)
    assert await observation_store.get("owner-1", "inst-a", T0 + LONG_TTL_MS) == obs
    assert await observation_store.get("owner-1", "inst-a", T0 + LONG_TTL_MS + 1) is None


async def test_an_old_receive_time_is_none_while_the_key_still_exists(
    observation_store: ObservationStore, backdoor: Backdoor
) -> None:
    # A restored dump: the value says ttl 1 s from T0, but its key lives on.
    obs = observation()
    await backdoor.write_raw("owner-1", "inst-a", encode(obs, 1_000))
    assert await observation_store.get("owner-1", "inst-a", T0 + 1_000) == obs  # readable
    assert await observation_store.get("owner-1", "inst-a", T0 + 1_001) is None
    assert await observation_store.get("owner-1", "inst-a", T0 + 86_400_000) is None


async def test_another_instance_or_owner_is_none(observation_store: ObservationStore) -> None:
    await observation_store.put(observation(), LONG_TTL_MS)
    assert await observation_store.get("owner-1", "inst-b", T0) is None
    assert await observation_store.get("owner-2", "inst-a", T0) is None
    assert await observation_store.get("owner-1", "inst-a", T0) is not None


async def test_a_value_of_another_instance_under_this_key_is_none(
    observation_store: ObservationStore, backdoor: Backdoor
) -> None:
    await backdoor.write_raw("owner-1", "inst-b", encode(observation(), LONG_TTL_MS))
    assert await observation_store.get("owner-1", "inst-b", T0) is None


async def test_ids_with_separators_never_share_a_key(observation_store: ObservationStore) -> None:
    left = observation(owner_id="a:b", runtime_instance_id="c")
    right = observation(owner_id="a", runtime_instance_id="b:c", limit=9)
    odd = observation(owner_id="a%3Ab", runtime_instance_id="c", limit=7)
    for obs in (left, right, odd):
        await observation_store.put(obs, LONG_TTL_MS)
    assert await observation_store.get("a:b", "c", T0) == left
    assert await observation_store.get("a", "b:c", T0) == right
    assert await observation_store.get("a%3Ab", "c", T0) == odd


async def test_flush_is_none(observation_store: ObservationStore, backdoor: Backdoor) -> None:
    await observation_store.put(observation(), LONG_TTL_MS)
    await backdoor.flush()
    assert await observation_store.get("owner-1", "inst-a", T0) is None


CORRUPT: dict[str, str | bytes] = {
    "not-json": "{not json",
    "not-utf8": b"\xff\xfe\xfd",
    "empty": "",
    "not-an-object": "[1, 2]",
    "missing-fields": '{"v":1,"owner_id":"owner-1","runtime_instance_id":"inst-a"}',
    "bad-types": encode(observation(), LONG_TTL_MS).replace('"limit":4', '"limit":"4"'),
    "invalid-observation": encode(observation(), LONG_TTL_MS).replace('"active":2', '"active":3'),
    "no-ttl": encode(observation(), LONG_TTL_MS).replace(f',"ttl_ms":{LONG_TTL_MS}', ""),
}


@pytest.mark.parametrize("raw", list(CORRUPT.values()), ids=list(CORRUPT))
async def test_corrupt_value_is_none(
    observation_store: ObservationStore, backdoor: Backdoor, raw: str | bytes
) -> None:
    await backdoor.write_raw("owner-1", "inst-a", raw)
    assert await observation_store.get("owner-1", "inst-a", T0) is None


async def test_put_rejects_an_invalid_observation_and_stores_nothing(
    observation_store: ObservationStore,
) -> None:
    with pytest.raises(ObservationRejected):
        await observation_store.put(observation(active=3), LONG_TTL_MS)
    assert await observation_store.get("owner-1", "inst-a", T0) is None


@pytest.mark.parametrize("ttl_ms", [0, -1])
async def test_put_rejects_a_non_positive_ttl(
    observation_store: ObservationStore, ttl_ms: int
) -> None:
    with pytest.raises(ValueError, match="ttl_ms"):
        await observation_store.put(observation(), ttl_ms)
    assert await observation_store.get("owner-1", "inst-a", T0) is None


# --- Redis specifics: the key layout the rest of the system relies on --------------------


@pytest.mark.redis
async def test_redis_key_value_and_px(redis_client: Redis) -> None:
    store = await RedisObservationStore.connect(REDIS_URL)
    try:
        obs = observation(owner_id="own:1", runtime_instance_id="in{st}")
        await store.put(obs, 30_000)
    finally:
        await store.close()
    key = "truerun:obs:own%3A1:in%7Bst%7D"
    seen = "truerun:obs~seen:own%3A1:in%7Bst%7D"  # the Runtimes page's, kept past the TTL
    assert sorted(await redis_client.keys("*")) == [key.encode(), seen.encode()]
    assert 0 < await redis_client.pttl(key) <= 30_000
    assert 30_000 < await redis_client.pttl(seen) <= 30_000 + SEEN_RETENTION_MS
    assert await redis_client.get(seen) == await redis_client.get(key)
    raw = await redis_client.get(key)
    assert raw is not None
    assert b" " not in raw
    document = json.loads(raw)
    assert document["ttl_ms"] == 30_000
    assert document["received_at_ms"] == T0
    assert document["owner_id"] == "own:1"


@pytest.mark.redis
async def test_redis_key_of_another_type_is_none(redis_client: Redis) -> None:
    store = await RedisObservationStore.connect(REDIS_URL)
    try:
        await redis_client.zadd(store.key("owner-1", "inst-a"), {"x": 1})
        assert await store.get("owner-1", "inst-a", T0) is None
    finally:
        await store.close()
