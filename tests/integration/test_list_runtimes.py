"""CapacityService.ListRuntimes and ListAgents over real gRPC (SQLite and PostgreSQL): what
the Runtimes and Agents pages read. A token of every project sees every runtime; a project
token only those of owners with a run in its projects; agents are listed whether or not a
run names them. Bad input is INVALID_ARGUMENT with its reason."""

from __future__ import annotations

import grpc
import pytest
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import capacity_service_pb2_grpc, run_service_pb2_grpc
from truerun.v1 import run_service_pb2 as rs

from capacity.service.agents import AgentService
from coordinator.api.credentials import FailureLimit
from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from services.bootstrap import capacity_sql, coordinator, open_store
from tests.integration.test_every_rpc_authenticates import (
    OPERATOR_TOKEN,
    OTHER_TOKEN,
    READER_TOKEN,
    SERVICE_TOKEN,
    auth_services,
)
from tests.integration.test_run_service_grpc import error_info
from tests.support.auth import aio_channel


def _observation(owner: str, instance: str, limit: int, version: str = "") -> cap.Observation:
    return cap.Observation(
        owner_id=owner,
        runtime_instance_id=instance,
        routes=[cap.Route(device_id=f"{instance}-dev", kind="local")],
        limit=limit,
        active=1,
        active_task_ids=["task-1"],
        agent_version=version,
    )


async def test_runtimes_are_scoped_to_the_owners_of_the_tokens_projects(
    migrated_database_url: str,
) -> None:
    async with auth_services(migrated_database_url, FailureLimit(limit=10_000)) as address:
        async with aio_channel(address, OPERATOR_TOKEN) as ops:
            runs = run_service_pb2_grpc.RunServiceStub(ops)
            capacity = capacity_service_pb2_grpc.CapacityServiceStub(ops)
            for project, owner in (("proj-p", "owner-p"), ("proj-q", "owner-q")):
                await runs.CreateRun(
                    rs.CreateRunRequest(project_id=project, owner_id=owner, task_id="t")
                )
            for owner, instance, limit in (
                ("owner-p", "inst-p", 2),
                ("owner-q", "inst-q", 3),
                ("owner-none", "inst-n", 1),
            ):
                async with aio_channel(address, SERVICE_TOKEN) as service:  # as a runtime's
                    await capacity_service_pb2_grpc.CapacityServiceStub(service).ReportObservation(
                        cap.ReportObservationRequest(
                            observation=_observation(owner, instance, limit, "agent/9.9")
                        )
                    )
            await capacity.ConfigureAgent(
                cap.ConfigureAgentRequest(agent=cap.Agent(agent_id="idle-agent", concurrency=1))
            )
            everything = await capacity.ListRuntimes(cap.ListRuntimesRequest())
            only_q = await capacity.ListRuntimes(cap.ListRuntimesRequest(owner_id="owner-q"))
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await capacity.ListRuntimes(cap.ListRuntimesRequest(owner_id="no spaces"))
        async with aio_channel(address, OTHER_TOKEN) as app_of_q:  # an app: every owner of q
            capacity = capacity_service_pb2_grpc.CapacityServiceStub(app_of_q)
            seen_by_q = await capacity.ListRuntimes(cap.ListRuntimesRequest())
        async with aio_channel(address, READER_TOKEN) as kim:  # kim acts for owner o only
            capacity = capacity_service_pb2_grpc.CapacityServiceStub(kim)
            seen_by_kim = await capacity.ListRuntimes(cap.ListRuntimesRequest())
            agents = await capacity.ListAgents(cap.ListAgentsRequest())

    rows = [(r.owner_id, r.runtime_instance_id, r.limit, r.occupied) for r in everything.runtimes]
    assert rows == [
        ("owner-none", "inst-n", 1, 1),
        ("owner-p", "inst-p", 2, 1),
        ("owner-q", "inst-q", 3, 1),
    ]
    first = everything.runtimes[0]
    assert first.state == cap.RUNTIME_STATE_CONNECTED
    assert (first.agent_version, first.runtime_active, first.routes[0].device_id) == (
        "agent/9.9",
        1,
        "inst-n-dev",
    )
    assert first.HasField("last_heartbeat_time") and first.heartbeat_age.seconds < 10
    assert everything.observation_ttl_ms == 15_000
    assert [r.owner_id for r in only_q.runtimes] == ["owner-q"]
    assert [r.owner_id for r in seen_by_q.runtimes] == ["owner-q"]
    assert [r.owner_id for r in seen_by_kim.runtimes] == []  # owner-p's runtime: not hers
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(bad.value).reason == "INVALID_ARGUMENT"
    assert [(a.agent_id, a.concurrency, a.live_attempts) for a in agents.agents] == [
        ("idle-agent", 1, 0)
    ]


async def test_capacity_sql_for_the_lists(migrated_database_url: str) -> None:
    """The three reads behind the lists, on each database: replaced instances (recorded by
    the lineage door), owners with runs in projects, configured agent ids."""
    store = await open_store(migrated_database_url)
    try:
        app = coordinator(store)
        sql = capacity_sql(store)
        await app.transitions.record_lineage("own", "old", "pod", 1_000)
        await app.transitions.record_lineage("own", "new", "pod", 2_000)
        await app.transitions.mark_replaced("own", "old", 2_500)
        replaced = await sql.replaced_instances([("own", "old"), ("own", "new"), ("x", "old")])
        actor = Actor(ActorType.USER, "tester")
        for project, owner in (("p1", "a"), ("p2", "b")):
            spec = c.RunSpec(project_id=project, owner_id=owner, task_id="t", created_by=actor)
            await app.transitions.create(spec)
        with_runs = await sql.owners_with_runs_in(["a", "b", "nobody"], ["p1", "p9"])
        for agent in ("zed", "amy"):
            await AgentService(sql).configure(agent, 1, "none", "", 1)
        ids = await sql.agent_ids(10)
    finally:
        await store.close()
    assert replaced == {("own", "old"): 2_500}
    assert with_runs == {"a"}
    assert ids == ["amy", "zed"]
