"""CapacityService over gRPC."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import duration_pb2
from truerun.v1 import capacity_service_pb2 as pb
from truerun.v1 import capacity_service_pb2_grpc

from capacity.domain.runtimes import RuntimeView
from capacity.observations.base import SEEN_RETENTION_MS
from capacity.service.agents import AgentService, AgentView
from capacity.service.claims import Blocked, ClaimOutcome, ClaimService, outcome_from_snapshot
from capacity.service.reports import ObservationService
from coordinator.api import convert, validation
from coordinator.api.authorization import allow
from coordinator.api.convert import observation_from_proto, timestamp
from coordinator.api.errors import unary
from coordinator.api.request_ids import once
from coordinator.dispatch.capacity_port import ALL_PROJECTS
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.store.base import RequestRecord, RunReader
from coordinator.store.snapshots import Snapshot
from kernel.errors import InvalidArgument

Ctx = grpc.aio.ServicerContext[Any, Any]

DEFAULT_LEASE_TTL_MS = 30_000
MAX_CLAIMS_PER_CALL = 64
_WORKSPACE_KINDS = {
    pb.WORKSPACE_KIND_UNSPECIFIED: "none",
    pb.WORKSPACE_KIND_GIT: "git",
    pb.WORKSPACE_KIND_DIRECTORY: "directory",
    pb.WORKSPACE_KIND_NONE: "none",
}
_KIND_NUMBERS = {
    "git": pb.WORKSPACE_KIND_GIT,
    "directory": pb.WORKSPACE_KIND_DIRECTORY,
    "none": pb.WORKSPACE_KIND_NONE,
}
_BLOCKED = {
    Blocked.NONE: pb.CLAIM_BLOCK_REASON_UNSPECIFIED,
    Blocked.NO_FRESH_OBSERVATION: pb.CLAIM_BLOCK_REASON_NO_FRESH_OBSERVATION,
    Blocked.INSTANCE_MISMATCH: pb.CLAIM_BLOCK_REASON_INSTANCE_MISMATCH,
    Blocked.UNKNOWN_ROUTE: pb.CLAIM_BLOCK_REASON_UNKNOWN_ROUTE,
    Blocked.DEVICE_FULL: pb.CLAIM_BLOCK_REASON_DEVICE_FULL,
    Blocked.NOTHING_ELIGIBLE: pb.CLAIM_BLOCK_REASON_NOTHING_ELIGIBLE,
    Blocked.AGENT_LIMIT: pb.CLAIM_BLOCK_REASON_AGENT_LIMIT,
    Blocked.SCOPE_BUSY: pb.CLAIM_BLOCK_REASON_SCOPE_BUSY,
}


def claim_response(outcome: ClaimOutcome) -> pb.ClaimResponse:
    return pb.ClaimResponse(
        claimed=[
            pb.ClaimedAttempt(
                run_id=item.run.id,
                attempt_id=item.attempt.id,
                runtime_task_id=item.attempt.runtime_task_id,
                lease_token=item.attempt.lease_token or "",
                lease_expire_time=timestamp(item.attempt.lease_expires_at_ms or 0),
                run_version=item.run.version,
                spec=convert.struct(item.run.spec),
                front_of_queue=item.run.run_now,
                agent_id=item.run.agent_id or "",
                workspace_path=item.workspace_path,
                callback_token_hash=item.attempt.callback_token_hash or "",
            )
            for item in outcome.claimed
        ],
        blocked_reason=_BLOCKED[outcome.blocked],
        blocked_detail=outcome.detail,
    )


def _token_hash(value: str) -> str:
    """A callback token hash as the coordinator makes them (hex SHA-256), nothing else: the
    field must never carry a token itself."""
    if len(value) != 64 or value.strip("0123456789abcdef"):
        raise InvalidArgument("callback_token_hashes holds hex SHA-256 digests only")
    return value


def _never_recorded(snapshot: Snapshot) -> pb.Agent:
    raise AssertionError("ConfigureAgent keeps no request record")


def _agent(view: AgentView) -> pb.Agent:
    config = view.config
    return pb.Agent(
        agent_id=config.agent_id,
        concurrency=config.concurrency,
        workspace_kind=_KIND_NUMBERS[config.workspace_kind],
        workspace_path=config.workspace_path,
        fairness_weight=config.fairness_weight,
        live_attempts=view.live_attempts,
        update_time=timestamp(config.updated_at_ms),
    )


def _duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _runtime(view: RuntimeView) -> pb.RuntimeInstance:
    obs, occ = view.observation, view.occupancy
    message = pb.RuntimeInstance(
        owner_id=obs.owner_id,
        runtime_instance_id=obs.runtime_instance_id,
        routes=[pb.Route(device_id=r.device_id, kind=r.kind) for r in obs.routes],
        state=pb.RUNTIME_STATE_CONNECTED if view.connected else pb.RUNTIME_STATE_STALE,
        state_detail=view.detail,
        limit=occ.limit,
        occupied=occ.occupied,
        runtime_active=occ.runtime_active,
        queued=obs.queued,
        last_heartbeat_time=timestamp(obs.received_at_ms),
        heartbeat_age=_duration(view.age_ms),
        lineage=obs.lineage,
        agent_version=obs.agent_version,
        labels=list(obs.labels),
    )
    if view.replaced_at_ms is not None:
        message.replace_time.CopyFrom(timestamp(view.replaced_at_ms))
    return message


class CapacityServicer(capacity_service_pb2_grpc.CapacityServiceServicer):
    async def _sees_owner(self, owner: str) -> bool:
        """Whether the caller may read ``owner``'s runtimes: it acts for the owner, and sees
        every project or one the owner has runs in (the rule of ListRuntimes)."""
        principal = allow("CapacityService.GetOccupancy")
        if not principal.acts_for(owner):
            return False
        return principal.all_projects or await self._observations.has_runs_in(
            owner, principal.projects
        )

    def __init__(
        self,
        store: RunReader,
        claims: ClaimService,
        observations: ObservationService,
        agents: AgentService,
    ) -> None:
        self._store = store
        self._claims = claims
        self._observations = observations
        self._agents = agents

    @unary
    async def ReportObservation(
        self, request: pb.ReportObservationRequest, context: Ctx
    ) -> pb.ReportObservationResponse:
        # Observations come from runtimes (their stream) or truerun's own service identity,
        # never from an API token: a report is what lets a claim hand out work.
        allow("CapacityService.ReportObservation")
        observation = observation_from_proto(request.observation)
        stored = await self._observations.report(observation)
        return pb.ReportObservationResponse(
            ttl_ms=self._observations.ttl_ms, receive_time=timestamp(stored.received_at_ms)
        )

    @unary
    async def Claim(self, request: pb.ClaimRequest, context: Ctx) -> pb.ClaimResponse:
        allow("CapacityService.Claim")  # a claim answers lease tokens and specs
        owner = validation.name(request.owner_id, "owner_id") or ""
        instance = validation.name(request.runtime_instance_id, "runtime_instance_id") or ""
        device = validation.name(request.device_id, "device_id") or ""
        wanted = validation.in_range(request.max_attempts, "max_attempts", 1, MAX_CLAIMS_PER_CALL)
        ttl = validation.in_range(
            request.lease_ttl_ms or DEFAULT_LEASE_TTL_MS, "lease_ttl_ms", 1_000, 3_600_000
        )
        hashes = [_token_hash(h) for h in request.callback_token_hashes]
        served = [
            p if p == ALL_PROJECTS else validation.name(p, "served_project_ids[]") or ""
            for p in request.served_project_ids
        ]
        if not served:
            raise InvalidArgument('served_project_ids is required ("*" = every project)')
        projects = None if ALL_PROJECTS in served else served
        actor = Actor(ActorType.SCHEDULER, f"capacity:{instance}")

        async def execute(record: RequestRecord | None) -> pb.ClaimResponse:
            outcome = await self._claims.claim(
                owner, instance, device, wanted, ttl, actor, record, hashes, projects
            )
            return claim_response(outcome)

        return await once(
            self._store,
            "Claim",
            request,
            pb.ClaimResponse,
            execute,
            lambda snapshot: claim_response(outcome_from_snapshot(snapshot)),
        )

    @unary
    async def GetOccupancy(self, request: pb.GetOccupancyRequest, context: Ctx) -> pb.Occupancy:
        owner = validation.name(request.owner_id, "owner_id") or ""
        instance = validation.name(request.runtime_instance_id, "runtime_instance_id") or ""
        if not await self._sees_owner(owner):  # as for an instance never seen
            owner = ""
        view = await self._observations.occupancy(owner, instance)
        occ = view.occupancy
        message = pb.Occupancy(
            limit=occ.limit,
            occupied=occ.occupied,
            runtime_active=occ.runtime_active,
            durable_rows=occ.durable_rows,
            merged_task_ids=list(occ.merged_task_ids),
            free_slots=occ.free_slots if view.fresh else 0,
            observation_fresh=view.fresh,
            durable_only_task_ids=list(occ.durable_only_task_ids),
        )
        if view.age_ms is not None:
            message.observation_age.CopyFrom(_duration(view.age_ms))
        return message

    @unary
    async def ListRuntimes(
        self, request: pb.ListRuntimesRequest, context: Ctx
    ) -> pb.ListRuntimesResponse:
        # A token of every project sees the runtimes of every owner it acts for, a project
        # token those of the owners it acts for with runs in its projects (docs/tenancy.md).
        principal = allow("CapacityService.ListRuntimes")
        owner = validation.name(request.owner_id, "owner_id", required=False) or ""
        projects = None if principal.all_projects else principal.projects
        views = await self._observations.runtimes(projects, owner)
        return pb.ListRuntimesResponse(
            runtimes=[
                _runtime(view) for view in views if principal.acts_for(view.observation.owner_id)
            ],
            observation_ttl_ms=self._observations.ttl_ms,
            seen_retention_ms=SEEN_RETENTION_MS,
        )

    @unary
    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: Ctx
    ) -> pb.ListAgentsResponse:
        allow("CapacityService.ListAgents")  # settings are cluster-wide, shown to any token
        return pb.ListAgentsResponse(
            agents=[_agent(view) for view in await self._agents.list_all()]
        )

    @unary
    async def ConfigureAgent(self, request: pb.ConfigureAgentRequest, context: Ctx) -> pb.Agent:
        # An agent's settings apply to its runs in every project: an operator of all of them.
        allow("CapacityService.ConfigureAgent")
        a = request.agent
        if a.workspace_kind not in _WORKSPACE_KINDS:
            raise InvalidArgument(f"unknown workspace_kind {a.workspace_kind}")
        agent_id = validation.name(a.agent_id, "agent.agent_id") or ""
        path = validation.text(a.workspace_path, "agent.workspace_path", 1024) or ""

        async def execute(record: RequestRecord | None) -> pb.Agent:
            view = await self._agents.configure(
                agent_id,
                a.concurrency,
                _WORKSPACE_KINDS[a.workspace_kind],
                path,
                a.fairness_weight or 1,
            )
            return _agent(view)

        # Agents' rows are capacity's own, written outside the run store: no record is kept
        # (nothing to render from), and a repeat configures the same values again.
        return await once(
            self._store, "ConfigureAgent", request, pb.Agent, execute, _never_recorded
        )

    @unary
    async def GetAgent(self, request: pb.GetAgentRequest, context: Ctx) -> pb.Agent:
        allow("CapacityService.GetAgent")
        return _agent(await self._agents.get(validation.name(request.agent_id, "agent_id") or ""))
