"""ConfigureAgent / GetAgent: an agent's concurrency R, workspace and fairness weight."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from capacity.store.base import AgentConfig, CapacitySql
from kernel.errors import AgentNotFound, InvalidArgument, WorkspaceNotIsolated
from kernel.ids import now_ms

WORKSPACE_KINDS = ("git", "directory", "none")
MAX_CONCURRENCY = 1000
MAX_WEIGHT = 100
#: ListAgents answers at most this many agents (settings, not a queue: a few per cluster).
MAX_LISTED = 1000


@dataclass(frozen=True, slots=True)
class AgentView:
    config: AgentConfig
    live_attempts: int


def is_git_work_tree(path: str) -> bool:
    """A git work tree has a .git directory (or, for a worktree, a .git file)."""
    return bool(path) and (Path(path) / ".git").exists()


def check_isolation(concurrency: int, workspace_kind: str, workspace_path: str) -> None:
    """R > 1 needs one git worktree per attempt; a shared plain directory would have two
    attempts write the same files. Checked here and again by the runtime before Start."""
    if concurrency <= 1:
        return
    if workspace_kind != "git" or not is_git_work_tree(workspace_path):
        raise WorkspaceNotIsolated(
            f"concurrency {concurrency} needs a git workspace (one worktree per attempt); "
            f"{workspace_path or 'no path'!r} is not a git work tree",
            workspace_path=workspace_path,
        )


class AgentService:
    def __init__(self, sql: CapacitySql, clock: Callable[[], int] = now_ms) -> None:
        self._sql = sql
        self._clock = clock

    async def configure(
        self,
        agent_id: str,
        concurrency: int,
        workspace_kind: str,
        workspace_path: str,
        fairness_weight: int,
    ) -> AgentView:
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise InvalidArgument(f"concurrency must be between 1 and {MAX_CONCURRENCY}")
        if not 1 <= fairness_weight <= MAX_WEIGHT:
            raise InvalidArgument(f"fairness_weight must be between 1 and {MAX_WEIGHT}")
        if workspace_kind not in WORKSPACE_KINDS:
            raise InvalidArgument(f"workspace_kind must be one of {', '.join(WORKSPACE_KINDS)}")
        check_isolation(concurrency, workspace_kind, workspace_path)
        config = AgentConfig(
            agent_id, concurrency, workspace_kind, workspace_path, fairness_weight, self._clock()
        )
        await self._sql.put_agent(config)
        return await self.get(agent_id)

    async def get(self, agent_id: str) -> AgentView:
        configs = await self._sql.agent_configs(None, [agent_id])
        if agent_id not in configs:
            raise AgentNotFound(f"agent {agent_id} is not configured", agent_id=agent_id)
        live = await self._sql.live_per_agent(None, [agent_id])
        return AgentView(configs[agent_id], live.get(agent_id, 0))

    async def list_all(self) -> list[AgentView]:
        """Every configured agent by id, with its live attempts (none named by a run too)."""
        ids = await self._sql.agent_ids(MAX_LISTED)
        configs = await self._sql.agent_configs(None, ids)
        live = await self._sql.live_per_agent(None, ids)
        return [AgentView(configs[a], live.get(a, 0)) for a in ids if a in configs]
