"""What the claim transaction and the capacity API need from the database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from capacity.domain.planner import Candidate
from coordinator.store.base import RunTxReader

#: Attempt states that hold a device slot, an agent slot and their scope. An `unknown`
#: attempt is one of these with a stale sync, so it keeps its slot.
LIVE_STATUSES = ("claimed", "starting", "running")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    agent_id: str
    concurrency: int
    workspace_kind: str
    workspace_path: str
    fairness_weight: int
    updated_at_ms: int


#: An open transaction, as the coordinator's door hands it out (Transitions.transaction):
#: reads, locks and this package's own statements; no run write.
ClaimTx = RunTxReader


class CapacitySql(Protocol):
    async def durable_task_ids(self, tx: ClaimTx | None, owner: str, instance: str) -> list[str]:
        """Task ids of the live attempts claimed for this owner + runtime instance."""

    async def lanes_with_work(self, tx: ClaimTx, owner: str) -> list[str | None]:
        """Every agent with a queued run of the owner (None: runs without an agent)."""

    async def lane_heads(
        self,
        tx: ClaimTx,
        owner: str,
        instance: str,
        lanes: Sequence[str | None],
        per_lane: int,
        labels: Sequence[str],
        projects: Sequence[str] | None = None,
    ) -> list[Candidate]:
        """Each lane's first ``per_lane`` queued runs in claim order that may run on
        ``instance``: of one of ``projects`` (None: every project), not pinned elsewhere,
        every required label among ``labels``, scope not busy (a hint, re-checked under the
        scope locks)."""

    async def agent_configs(
        self, tx: ClaimTx | None, agent_ids: Sequence[str]
    ) -> dict[str, AgentConfig]: ...

    async def live_per_agent(
        self, tx: ClaimTx | None, agent_ids: Sequence[str]
    ) -> dict[str, int]: ...

    async def busy_scopes(self, tx: ClaimTx, scopes: Sequence[str]) -> set[str]: ...

    async def waits_for_a_scope(self, tx: ClaimTx, owner: str) -> bool:
        """Whether a queued run of the owner waits for a busy execution scope."""

    async def fairness(
        self, tx: ClaimTx, owner: str, lanes: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        """The owner's virtual clock and the lanes' virtual times (0 when unknown)."""

    async def save_fairness(
        self, tx: ClaimTx, owner: str, clock: int, vtimes: dict[str, int]
    ) -> None: ...

    async def put_agent(self, agent: AgentConfig) -> None: ...

    async def agent_ids(self, limit: int) -> list[str]:
        """The configured agents' ids in order, at most ``limit``."""

    async def replaced_instances(
        self, instances: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        """When each of ``instances`` (owner, instance) was marked replaced by a newer
        instance of its lineage (runtime_instances.replaced_at_ms); absent when it was not."""

    async def owners_with_runs_in(self, owners: Sequence[str], projects: Sequence[str]) -> set[str]:
        """Those of ``owners`` with a run in one of ``projects``: whose runtimes a token of
        those projects may see (bounded by the runtimes listed, not by the runs)."""
