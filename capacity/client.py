"""The capacity service over gRPC, as the coordinator's port (`truerun coordinator`).

Deadlines on every call. Retries only where a repeat cannot do anything twice: a Claim
carries one request id for all of its tries (AIP-155: the capacity service answers a repeat
with the first, committed answer, even from another replica), and an observation report
just stores the newest observation again.

The address may name several replicas (``ipv4:127.0.0.1:7301,127.0.0.1:7302`` or
``dns:///truerun-capacity:7233``); calls are spread round-robin over the ones that answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import grpc
from truerun.v1 import capacity_service_pb2 as pb
from truerun.v1 import capacity_service_pb2_grpc

from coordinator.dispatch.capacity_port import ALL_PROJECTS, ClaimAnswer, ClaimedStart
from kernel.ids import uuid7
from kernel.observation import Observation
from kernel.tls import TlsFiles, aio_channel

if TYPE_CHECKING:
    from truerun.v1.capacity_service_pb2_grpc import CapacityServiceAsyncStub

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Codes after which the same request may simply be sent again (to any replica).
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_BLOCKED = {
    pb.CLAIM_BLOCK_REASON_UNSPECIFIED: "",
    pb.CLAIM_BLOCK_REASON_NO_FRESH_OBSERVATION: "no_fresh_observation",
    pb.CLAIM_BLOCK_REASON_INSTANCE_MISMATCH: "instance_mismatch",
    pb.CLAIM_BLOCK_REASON_UNKNOWN_ROUTE: "unknown_route",
    pb.CLAIM_BLOCK_REASON_DEVICE_FULL: "device_full",
    pb.CLAIM_BLOCK_REASON_NOTHING_ELIGIBLE: "nothing_eligible",
    pb.CLAIM_BLOCK_REASON_AGENT_LIMIT: "agent_limit",
    pb.CLAIM_BLOCK_REASON_SCOPE_BUSY: "scope_busy",
}


def observation_to_proto(o: Observation) -> pb.Observation:
    message = pb.Observation(
        owner_id=o.owner_id,
        runtime_instance_id=o.runtime_instance_id,
        routes=[pb.Route(device_id=r.device_id, kind=r.kind) for r in o.routes],
        limit=o.limit,
        active=o.active,
        active_task_ids=list(o.active_task_ids),
        queued=o.queued,
        labels=list(o.labels),
        queued_task_ids=list(o.queued_task_ids),
        agent_version=o.agent_version,
        lineage=o.lineage,
    )
    if o.observed_at_ms is not None:
        message.observe_time.FromMilliseconds(o.observed_at_ms)
    return message


class CapacityClient:
    def __init__(
        self,
        address: str,
        ttl_ms: int,
        timeout_s: float = 5.0,
        attempts: int = 4,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
        tls: TlsFiles | None = None,
    ) -> None:
        self.ttl_ms = ttl_ms
        self._timeout_s = timeout_s
        self._attempts = attempts
        # TLS when the address is https://... or ``tls`` names files (kernel/tls.py)
        self._channel = aio_channel(
            address,
            tls or TlsFiles(),
            options=[("grpc.lb_policy_name", "round_robin"), ("grpc.enable_retries", 0)],
            interceptors=interceptors,
        )
        self._stub: CapacityServiceAsyncStub = capacity_service_pb2_grpc.CapacityServiceStub(
            self._channel
        )

    async def close(self) -> None:
        await self._channel.close(None)

    async def claim(
        self,
        owner: str,
        instance: str,
        device_id: str,
        max_claims: int,
        lease_ttl_ms: int,
        fence_hashes: Sequence[str] = (),
        projects: Sequence[str] | None = None,
    ) -> ClaimAnswer:
        request = pb.ClaimRequest(
            request_id=uuid7(),  # one id for every try: a repeat replays, never claims again
            owner_id=owner,
            runtime_instance_id=instance,
            device_id=device_id,
            max_attempts=max_claims,
            lease_ttl_ms=lease_ttl_ms,
            callback_token_hashes=list(fence_hashes),
            served_project_ids=[ALL_PROJECTS] if projects is None else list(projects),
        )
        response = await self._retrying(lambda: self._stub.Claim(request, timeout=self._timeout_s))
        return ClaimAnswer(
            tuple(
                ClaimedStart(
                    run_id=item.run_id,
                    attempt_id=item.attempt_id,
                    runtime_task_id=item.runtime_task_id,
                    lease_token=item.lease_token,
                    spec=item.spec,
                    front_of_queue=item.front_of_queue,
                    workspace_path=item.workspace_path,
                    callback_token_hash=item.callback_token_hash,
                )
                for item in response.claimed
            ),
            _BLOCKED.get(response.blocked_reason, ""),
            response.blocked_detail,
        )

    async def report(self, observation: Observation) -> Observation:
        request = pb.ReportObservationRequest(observation=observation_to_proto(observation))
        response = await self._retrying(
            lambda: self._stub.ReportObservation(request, timeout=self._timeout_s)
        )
        return replace(observation, received_at_ms=response.receive_time.ToMilliseconds())

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        delay = 0.05
        for attempt in range(1, self._attempts + 1):
            try:
                return await call()
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRYABLE or attempt == self._attempts:
                    raise
                log.info("capacity call failed (%s); trying again", error.code().name)
            await asyncio.sleep(delay)
            delay = min(delay * 4, 1.0)
        raise AssertionError("unreachable")
