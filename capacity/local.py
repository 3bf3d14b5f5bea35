"""The capacity service called in-process (`truerun dev`): the coordinator's port over the
ClaimService and ObservationService of the same process."""

from __future__ import annotations

from collections.abc import Sequence

from capacity.service.claims import ClaimService
from coordinator.api.convert import struct
from coordinator.dispatch.capacity_port import ClaimAnswer, ClaimedStart
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType


class LocalClaims:
    def __init__(self, claims: ClaimService) -> None:
        self._claims = claims

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
        # The same actor the gRPC CapacityService records, so both modes write the same history.
        actor = Actor(ActorType.SCHEDULER, f"capacity:{instance}")
        outcome = await self._claims.claim(
            owner,
            instance,
            device_id,
            max_claims,
            lease_ttl_ms,
            actor,
            fence_hashes=fence_hashes,
            projects=projects,
        )
        return ClaimAnswer(
            tuple(
                ClaimedStart(
                    run_id=item.run.id,
                    attempt_id=item.attempt.id,
                    runtime_task_id=item.attempt.runtime_task_id,
                    lease_token=item.attempt.lease_token or "",
                    spec=struct(item.run.spec),
                    front_of_queue=item.run.run_now,
                    workspace_path=item.workspace_path,
                    callback_token_hash=item.attempt.callback_token_hash or "",
                )
                for item in outcome.claimed
            ),
            str(outcome.blocked),
            outcome.detail,
        )
