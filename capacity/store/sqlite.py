"""Capacity SQL for SQLite (the embedded default): one query per lane is cheap in-process."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from capacity.domain.planner import Candidate
from capacity.store.base import LIVE_STATUSES, AgentConfig, ClaimTx
from capacity.store.postgres import agent_config, candidate_of
from coordinator.store.sqlite import SqliteStore

_LIVE = "('" + "','".join(LIVE_STATUSES) + "')"
_HEAD_COLUMNS = "r.id, r.agent_id, r.priority, r.run_now, r.queued_at_ms, r.execution_scope"
_ELIGIBLE = (
    "r.owner_id = ? AND r.status = 'queued' "
    "AND (? IS NULL OR r.project_id IN (SELECT value FROM json_each(?))) "
    "AND (r.pinned_runtime_instance_id IS NULL OR r.pinned_runtime_instance_id = ?) "
    "AND NOT EXISTS (SELECT 1 FROM json_each(r.required_labels) need "
    "WHERE need.value NOT IN (SELECT value FROM json_each(?))) "
    "AND (r.execution_scope IS NULL OR NOT EXISTS (SELECT 1 FROM attempts s "
    f"WHERE s.execution_scope = r.execution_scope AND s.status IN {_LIVE}))"
)
_ORDER = "ORDER BY r.run_now DESC, r.priority DESC, r.queued_at_ms, r.id LIMIT ?"


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values)


class SqliteCapacitySql:
    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def _fetch(self, tx: ClaimTx | None, sql: str, *args: Any) -> list[Any]:
        if tx is not None:
            return await tx.fetch(sql, *args)
        return await self._store.read(sql, *args)

    async def durable_task_ids(self, tx: ClaimTx | None, owner: str, instance: str) -> list[str]:
        sql = (
            "SELECT runtime_task_id FROM attempts WHERE owner_id = ? AND runtime_instance_id = ?"
            f" AND status IN {_LIVE} ORDER BY runtime_task_id"
        )
        return [row[0] for row in await self._fetch(tx, sql, owner, instance)]

    async def lanes_with_work(self, tx: ClaimTx, owner: str) -> list[str | None]:
        sql = "SELECT DISTINCT agent_id FROM runs WHERE owner_id = ? AND status = 'queued'"
        return [row[0] for row in await tx.fetch(sql, owner)]

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
        heads: list[Candidate] = []
        reported = json.dumps(sorted(set(labels)))
        served = None if projects is None else json.dumps(list(projects))
        for lane in lanes:
            match = "r.agent_id IS NULL" if lane is None else "r.agent_id = ?"
            args: list[Any] = [owner, served, served, instance, reported]
            args += ([] if lane is None else [lane]) + [per_lane]
            sql = f"SELECT {_HEAD_COLUMNS} FROM runs r WHERE {_ELIGIBLE} AND {match} {_ORDER}"
            heads += [candidate_of(row) for row in await tx.fetch(sql, *args)]
        return heads

    async def agent_configs(
        self, tx: ClaimTx | None, agent_ids: Sequence[str]
    ) -> dict[str, AgentConfig]:
        if not agent_ids:
            return {}
        sql = (
            "SELECT agent_id, concurrency, workspace_kind, workspace_path, fairness_weight, "
            f"updated_at_ms FROM agents WHERE agent_id IN ({_marks(agent_ids)})"
        )
        rows = await self._fetch(tx, sql, *agent_ids)
        return {row["agent_id"]: agent_config(row) for row in rows}

    async def agent_ids(self, limit: int) -> list[str]:
        sql = "SELECT agent_id FROM agents ORDER BY agent_id LIMIT ?"
        return [row[0] for row in await self._store.read(sql, limit)]

    async def replaced_instances(
        self, instances: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        sql = (
            "SELECT replaced_at_ms FROM runtime_instances WHERE owner_id = ? "
            "AND runtime_instance_id = ? AND replaced_at_ms IS NOT NULL"
        )
        found: dict[tuple[str, str], int] = {}
        for owner, instance in instances:
            rows = await self._store.read(sql, owner, instance)
            if rows:
                found[(owner, instance)] = int(rows[0][0])
        return found

    async def owners_with_runs_in(self, owners: Sequence[str], projects: Sequence[str]) -> set[str]:
        found: set[str] = set()
        if not projects:
            return found
        sql = (
            f"SELECT 1 FROM runs WHERE owner_id = ? AND project_id IN ({_marks(projects)}) LIMIT 1"
        )
        for owner in owners:
            if await self._store.read(sql, owner, *projects):
                found.add(owner)
        return found

    async def live_per_agent(self, tx: ClaimTx | None, agent_ids: Sequence[str]) -> dict[str, int]:
        if not agent_ids:
            return {}
        sql = (
            f"SELECT agent_id, count(*) AS live FROM attempts WHERE agent_id IN "
            f"({_marks(agent_ids)}) AND status IN {_LIVE} GROUP BY agent_id"
        )
        rows = await self._fetch(tx, sql, *agent_ids)
        return {row["agent_id"]: int(row["live"]) for row in rows}

    async def busy_scopes(self, tx: ClaimTx, scopes: Sequence[str]) -> set[str]:
        if not scopes:
            return set()
        sql = (
            f"SELECT DISTINCT execution_scope FROM attempts WHERE execution_scope IN "
            f"({_marks(scopes)}) AND status IN {_LIVE}"
        )
        return {row[0] for row in await tx.fetch(sql, *scopes)}

    async def waits_for_a_scope(self, tx: ClaimTx, owner: str) -> bool:
        sql = (
            "SELECT 1 FROM runs r WHERE r.owner_id = ? AND r.status = 'queued' AND EXISTS ("
            "SELECT 1 FROM attempts s WHERE s.execution_scope = r.execution_scope "
            f"AND s.status IN {_LIVE}) LIMIT 1"
        )
        return bool(await tx.fetch(sql, owner))

    async def fairness(
        self, tx: ClaimTx, owner: str, lanes: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        clock = await tx.fetch("SELECT clock FROM fair_clocks WHERE owner_id = ?", owner)
        vtimes: dict[str, int] = {}
        if lanes:
            sql = (
                "SELECT lane, vtime FROM fair_lanes WHERE owner_id = ? AND lane IN "
                f"({_marks(lanes)})"
            )
            vtimes = {row["lane"]: row["vtime"] for row in await tx.fetch(sql, owner, *lanes)}
        return (clock[0][0] if clock else 0), vtimes

    async def save_fairness(
        self, tx: ClaimTx, owner: str, clock: int, vtimes: dict[str, int]
    ) -> None:
        await tx.fetch(
            "INSERT INTO fair_clocks (owner_id, clock) VALUES (?, ?) "
            "ON CONFLICT (owner_id) DO UPDATE SET clock = excluded.clock",
            owner,
            clock,
        )
        for lane in sorted(vtimes):
            await tx.fetch(
                "INSERT INTO fair_lanes (owner_id, lane, vtime) VALUES (?, ?, ?) "
                "ON CONFLICT (owner_id, lane) DO UPDATE SET vtime = excluded.vtime",
                owner,
                lane,
                vtimes[lane],
            )

    async def put_agent(self, agent: AgentConfig) -> None:
        await self._store.write(
            "INSERT INTO agents (agent_id, concurrency, workspace_kind, workspace_path, "
            "fairness_weight, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (agent_id) DO UPDATE SET concurrency = excluded.concurrency, "
            "workspace_kind = excluded.workspace_kind, workspace_path = excluded.workspace_path,"
            " fairness_weight = excluded.fairness_weight, updated_at_ms = excluded.updated_at_ms",
            agent.agent_id,
            agent.concurrency,
            agent.workspace_kind,
            agent.workspace_path,
            agent.fairness_weight,
            agent.updated_at_ms,
        )
