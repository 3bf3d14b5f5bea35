"""The Redis observation store after a network reset: its pooled connections were reset
while idle, which the client learns only when it next writes to one. Each call must still
succeed (once more on a new connection), on asyncio's loop and on uvloop (the servers'),
whose errors for a written-to reset socket differ; a Redis that keeps resetting still
fails the call, after one retry, as an outage.

Real Redis behind the project's fault proxy; the keys go to the test database."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

import pytest
import uvloop

from capacity.observations import Observation, RedisObservationStore, Route
from kernel.outages import is_outage
from tests.faults.proxy import FaultProxy
from tests.support.databases import redis_test_url

pytestmark = pytest.mark.redis

T0 = 1_700_000_000_000
TTL_MS = 600_000
POOLED = 3  # idle connections in the pool when the reset comes
Runner = Callable[[Coroutine[Any, Any, None]], None]
LOOPS: dict[str, Runner] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


def _observation() -> Observation:
    return Observation(
        owner_id="owner-reset",
        runtime_instance_id="inst-reset",
        routes=(Route("dev-local", "local"),),
        limit=2,
        active=0,
        active_task_ids=(),
        queued=0,
        labels=(),
        observed_at_ms=T0 - 5,
        received_at_ms=T0,
    )


def _through(proxy: FaultProxy) -> str:
    database = urlsplit(redis_test_url()).path  # "/15"
    return f"redis://{proxy.address}{database}"


async def _store(proxy: FaultProxy, prefix: str) -> RedisObservationStore:
    store = await RedisObservationStore.connect(_through(proxy), key_prefix=prefix)
    obs = _observation()
    await store.put(obs, TTL_MS)
    # several connections in the pool, all idle when the reset comes
    await asyncio.gather(
        *(store.get(obs.owner_id, obs.runtime_instance_id, T0) for _ in range(POOLED))
    )
    return store


def _calls(store: RedisObservationStore) -> dict[str, Callable[[], Awaitable[object]]]:
    obs = _observation()
    return {
        "get": lambda: store.get(obs.owner_id, obs.runtime_instance_id, T0),
        "put": lambda: store.put(obs, TTL_MS),
        "recent": lambda: store.recent(T0),
    }


def _upstream() -> tuple[str, int]:
    parts = urlsplit(redis_test_url())
    return parts.hostname or "127.0.0.1", parts.port or 6379


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("call", ["get", "put", "recent"])
def test_the_first_call_after_a_reset_succeeds(loop: str, call: str) -> None:
    async def scenario(proxy: FaultProxy) -> None:
        store = await _store(proxy, f"truerun:reset-{loop}-{call}")
        try:
            accepted = proxy.accepted
            assert proxy.reset_connections() >= 2  # the pool's idle connections, reset
            answer = await _calls(store)[call]()
            if call == "get":
                assert answer == _observation()
            if call == "recent":
                assert answer == [(_observation(), TTL_MS)]
            assert proxy.accepted > accepted  # it went over a new connection
            # and the store goes on working
            assert await _calls(store)["get"]() == _observation()
        finally:
            await store.close()

    with FaultProxy(_upstream(), "redis") as proxy:
        LOOPS[loop](scenario(proxy))


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_redis_that_keeps_resetting_fails_the_call_after_one_retry(loop: str) -> None:
    async def scenario(proxy: FaultProxy) -> None:
        store = await _store(proxy, f"truerun:resetting-{loop}")
        try:
            proxy.reset()  # open connections reset, and every new one at once
            resets = proxy.resets
            with pytest.raises(Exception) as raised:
                await _calls(store)["get"]()
            assert is_outage(raised.value), raised.value
            assert proxy.resets - resets == 1  # one retry's connection, then it gave up
        finally:
            proxy.pass_through()
            await store.close()

    with FaultProxy(_upstream(), "redis") as proxy:
        LOOPS[loop](scenario(proxy))
