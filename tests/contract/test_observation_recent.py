"""``ObservationStore.recent``: the instances seen lately, for the Runtimes page, alike in
the in-memory twin and Redis (TRUERUN_TEST_REDIS_URL, the contract tests' database).

An instance is listed while its last observation is within its TTL (connected) and for the
store's seen retention after that (stale), then no more; ``get`` (what claims read) is not
changed by it. In Redis the list is read by another connection than the one that wrote it,
as another replica of the capacity service would read it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from capacity.observations import MemoryObservationStore, ObservationStore, RedisObservationStore
from tests.contract.test_observation_store import T0, _redis_client, observation

TTL_MS = 30_000
RETENTION_MS = 60_000


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def stores(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[ObservationStore, ObservationStore]]:
    """(writer, reader): one store, or two Redis connections on one database."""
    if request.param == "memory":
        memory = MemoryObservationStore(seen_retention_ms=RETENTION_MS)
        yield memory, memory
        return
    client = await _redis_client()
    await client.flushdb()
    writer = RedisObservationStore(client, seen_retention_ms=RETENTION_MS)
    reader = RedisObservationStore(await _redis_client(), seen_retention_ms=RETENTION_MS)
    yield writer, reader
    await client.flushdb()
    await writer.close()
    await reader.close()


async def test_recent_lists_connected_then_stale_then_forgets(
    stores: tuple[ObservationStore, ObservationStore],
) -> None:
    writer, reader = stores
    a = observation(agent_version="truerun-agent/0.1.0", lineage="pod-a")
    b = observation(runtime_instance_id="inst-b", received_at_ms=T0 + 20_000)
    await writer.put(a, TTL_MS)
    await writer.put(b, TTL_MS)

    listed = sorted(await reader.recent(T0 + 1_000), key=lambda item: item[0].runtime_instance_id)
    assert listed == [(a, TTL_MS), (b, TTL_MS)]  # the Hello facts travel with it
    # a's TTL ran out: get (claims) no longer sees it, recent still lists it (stale)
    assert await reader.get("owner-1", "inst-a", T0 + TTL_MS + 1) is None
    later = {obs.runtime_instance_id for obs, _ in await reader.recent(T0 + TTL_MS + 1)}
    assert later == {"inst-a", "inst-b"}
    # past TTL + retention a is forgotten; b arrived 20 s later and is still listed
    gone = T0 + TTL_MS + RETENTION_MS + 1
    assert [obs.runtime_instance_id for obs, _ in await reader.recent(gone)] == ["inst-b"]


async def test_a_new_observation_replaces_the_listed_one(
    stores: tuple[ObservationStore, ObservationStore],
) -> None:
    writer, reader = stores
    await writer.put(observation(), TTL_MS)
    newer = observation(active=1, active_task_ids=("task-9",), received_at_ms=T0 + 500)
    await writer.put(newer, TTL_MS)
    assert await reader.recent(T0 + 600) == [(newer, TTL_MS)]
