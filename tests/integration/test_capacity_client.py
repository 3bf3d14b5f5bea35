"""The coordinator's gRPC port to the capacity service (capacity/client.py) against a real
CapacityService server on loopback, PostgreSQL and Redis: it answers exactly what the
in-process port answers, and it spreads over replica addresses. And the health statuses of a
serving process through a graceful shutdown."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import capacity_service_pb2_grpc

from capacity.client import CapacityClient
from capacity.local import LocalClaims
from capacity.observations.redis_store import RedisObservationStore
from coordinator.api.bearer import bearer_interceptors
from coordinator.dispatch.capacity_port import ClaimAnswer, Claims, ObservationReporter
from coordinator.dispatch.tokens import ANY_OWNER, RuntimeTokens, token_hash
from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from kernel.db.migrate import upgrade
from services.bootstrap import Capacity, Coordinator, capacity, coordinator, open_store
from services.bootstrap import runtimes as local_runtimes
from services.server import Serving, start_serving
from tests.integration.test_claim_race import REDIS_URL
from tests.support.auth import SERVICE_TOKEN, TEST_TOKEN, aio_channel, server_tokens
from tests.support.capacity import observation, rows

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
USER = Actor(ActorType.USER, "tester")
LEASE_TTL_MS = 30_000


@dataclass
class World:
    app: Coordinator
    caps: Capacity
    serving: Serving
    address: str


@pytest.fixture
async def world(pg_url: str) -> AsyncIterator[World]:
    await upgrade(pg_url)
    store = await open_store(pg_url)
    observations = await RedisObservationStore.connect(REDIS_URL)
    app = coordinator(store)
    caps = capacity(app, observations, 60_000)
    serving = await start_serving(
        app, "127.0.0.1:0", caps, run_service=False, tokens=server_tokens()
    )
    try:
        yield World(app, caps, serving, f"127.0.0.1:{serving.port}")
    finally:
        await serving.server.stop(0)
        await observations.close()
        await store.close()


async def _queue(app: Coordinator, owner: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        spec = c.RunSpec(
            project_id="p",
            owner_id=owner,
            task_id=f"t{i}",
            created_by=USER,
            spec={"command": f"echo {i}", "n": i},
            run_now=(i == 1),
        )
        ids.append((await app.transitions.create(spec)).run.id)
    return ids


async def _scenario(
    app: Coordinator, claims: Claims, reporter: ObservationReporter, owner: str
) -> list[ClaimAnswer]:
    """The same story for any port: no observation yet, D=2 with 3 queued, then full."""
    instance = "rt-1"
    answers = [await claims.claim(owner, instance, "dev-1", 32, LEASE_TTL_MS)]
    await _queue(app, owner, 3)
    stored = await reporter.report(observation(owner, instance, 2))
    assert stored.received_at_ms > 0
    answers.append(await claims.claim(owner, instance, "dev-1", 32, LEASE_TTL_MS))
    answers.append(await claims.claim(owner, instance, "dev-1", 32, LEASE_TTL_MS))
    answers.append(await claims.claim(owner, instance, "no-such-route", 32, LEASE_TTL_MS))
    return answers


def _shape(answer: ClaimAnswer) -> tuple[object, ...]:
    """Everything but the ids and tokens, which differ between two owners' runs."""
    return (
        answer.blocked,
        answer.detail,
        [(a.spec, a.front_of_queue, a.workspace_path, bool(a.lease_token)) for a in answer.claimed],
    )


async def test_claims_over_grpc_equal_claims_in_process(world: World, pg_url: str) -> None:
    local_owner, remote_owner = f"local-{uuid.uuid4().hex[:8]}", f"remote-{uuid.uuid4().hex[:8]}"
    local = await _scenario(
        world.app, LocalClaims(world.caps.claims), world.caps.reports, local_owner
    )
    client = CapacityClient(world.address, 60_000, interceptors=bearer_interceptors(SERVICE_TOKEN))
    try:
        remote = await _scenario(world.app, client, client, remote_owner)
    finally:
        await client.close()
    assert [_shape(a) for a in remote] == [_shape(a) for a in local]
    assert [a.blocked for a in remote] == [
        "no_fresh_observation",
        "device_full",
        "device_full",
        "unknown_route",
    ]
    assert len(remote[1].claimed) == 2 and remote[2].claimed == ()
    # What the client was told is what the database holds: the claimed attempts, their
    # lease tokens and task ids.
    claimed = {a.attempt_id: a for a in remote[1].claimed}
    found = await rows(
        pg_url,
        "SELECT a.id, a.lease_token, a.runtime_task_id, a.status, r.id AS run_id "
        "FROM attempts a JOIN runs r ON r.id = a.run_id "
        f"WHERE r.owner_id = '{remote_owner}' AND a.status = 'claimed'",
    )
    assert {row["id"] for row in found} == set(claimed)
    for row in found:
        assert row["lease_token"] == claimed[row["id"]].lease_token
        assert row["runtime_task_id"] == claimed[row["id"]].runtime_task_id
        assert row["run_id"] == claimed[row["id"]].run_id


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_client_spreads_over_replicas_and_skips_a_dead_one(world: World) -> None:
    owner = f"rr-{uuid.uuid4().hex[:8]}"
    address = f"ipv4:127.0.0.1:{_dead_port()},{world.address}"
    client = CapacityClient(
        address, 60_000, timeout_s=5.0, interceptors=bearer_interceptors(SERVICE_TOKEN)
    )
    try:
        await _queue(world.app, owner, 4)
        await client.report(observation(owner, "rt-1", 4))
        answers = [await client.claim(owner, "rt-1", "dev-1", 1, LEASE_TTL_MS) for _ in range(5)]
    finally:
        await client.close()
    assert [len(a.claimed) for a in answers] == [1, 1, 1, 1, 0]
    assert len({a.claimed[0].attempt_id for a in answers[:4]}) == 4


async def _status(stream: grpc.aio.UnaryStreamCall[object, object]) -> int:
    message = await asyncio.wait_for(stream.read(), 20)
    assert isinstance(message, health_pb2.HealthCheckResponse)
    return int(message.status)


async def test_health_goes_not_serving_on_shutdown(pg_url: str) -> None:
    await upgrade(pg_url)
    store = await open_store(pg_url)
    app = coordinator(store)
    caps = capacity(app, await RedisObservationStore.connect(REDIS_URL), 60_000)
    side = local_runtimes(app, caps, RuntimeTokens({token_hash("t"): ANY_OWNER}))
    serving = await start_serving(app, "127.0.0.1:0", caps, side, tokens=server_tokens())
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{serving.port}")
    try:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "truerun.v1.RunService", "truerun.v1.RuntimeService"):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, name
        watches = [
            health.Watch(health_pb2.HealthCheckRequest(service=name))
            for name in ("", "truerun.v1.RuntimeService")
        ]
        for watch in watches:
            assert await _status(watch) == health_pb2.HealthCheckResponse.SERVING
        shutdown = asyncio.create_task(serving.shutdown(5.0))
        for watch in watches:
            assert await _status(watch) == health_pb2.HealthCheckResponse.NOT_SERVING
        await asyncio.wait_for(shutdown, 30)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await channel.close(None)
        await serving.server.stop(0)
        await side.dispatcher.stop()
        await caps.observations.close()
        await store.close()


async def test_a_runtime_reported_through_one_replica_is_listed_by_another(
    world: World, pg_url: str
) -> None:
    """Split services: the coordinator reports over gRPC (with the Hello's facts), and a
    second capacity replica, with its own store and Redis connection, lists the runtime:
    the connected set lives in Redis, not in a process."""
    owner = f"ls-{uuid.uuid4().hex[:8]}"
    client = CapacityClient(world.address, 60_000, interceptors=bearer_interceptors(SERVICE_TOKEN))
    try:
        said = replace(observation(owner, "rt-1", 3), agent_version="agent/7", lineage="pod")
        await client.report(said)
    finally:
        await client.close()
    store = await open_store(pg_url)
    observations = await RedisObservationStore.connect(REDIS_URL)
    other_app = coordinator(store)
    other = await start_serving(
        other_app,
        "127.0.0.1:0",
        capacity(other_app, observations, 60_000),
        run_service=False,
        tokens=server_tokens(),
    )
    try:
        async with aio_channel(f"127.0.0.1:{other.port}", TEST_TOKEN) as channel:
            stub = capacity_service_pb2_grpc.CapacityServiceStub(channel)
            listed = await stub.ListRuntimes(cap.ListRuntimesRequest(owner_id=owner))
    finally:
        await other.server.stop(0)
        await observations.close()
        await store.close()
    assert [
        (r.runtime_instance_id, r.limit, r.agent_version, r.lineage, r.state)
        for r in listed.runtimes
    ] == [("rt-1", 3, "agent/7", "pod", cap.RUNTIME_STATE_CONNECTED)]
