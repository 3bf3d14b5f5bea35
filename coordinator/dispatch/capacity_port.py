"""What the coordinator needs from the capacity service, whether it runs in this process
(`truerun dev`) or behind gRPC (`truerun coordinator` with `TRUERUN_CAPACITY_ADDR`).

Both adapters answer in the same plain terms, so the dispatcher and the runtime servicer
cannot tell them apart and a test can compare them field by field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from google.protobuf import struct_pb2

from kernel.observation import Observation


@dataclass(frozen=True, slots=True)
class ClaimedStart:
    """One claimed attempt, with everything a Start needs."""

    run_id: str
    attempt_id: str
    runtime_task_id: str
    lease_token: str
    spec: struct_pb2.Struct
    front_of_queue: bool
    workspace_path: str
    #: The hash it was fenced with in the claim's own commit ("" when the claim set none).
    callback_token_hash: str = ""


#: A runtime token's binding to every project (docs/tenancy.md).
ALL_PROJECTS = "*"

#: ``ClaimAnswer.blocked`` of a round the queue ran dry in (capacity.service.claims.Blocked
#: NOTHING_ELIGIBLE): the dispatcher gathers before the next round only then.
QUEUE_DRAINED = "nothing_eligible"


@dataclass(frozen=True, slots=True)
class ClaimAnswer:
    claimed: tuple[ClaimedStart, ...]
    #: The capacity service's block reason ("" when none), as in capacity.service.claims.Blocked.
    blocked: str = ""
    detail: str = ""


class Claims(Protocol):
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
        """Claim up to ``max_claims``; with ``fence_hashes`` (capacity.service.claims) each
        claimed attempt is fenced in the same commit, the i-th with the i-th hash.
        ``projects``: those the runtime's token serves (None: every project)."""
        ...


class ObservationReporter(Protocol):
    #: How long an observation counts without a new one (told to runtimes in Welcome).
    ttl_ms: int

    async def report(self, observation: Observation) -> Observation:
        """Store the observation; returns it stamped with the capacity side's receive time."""
        ...
