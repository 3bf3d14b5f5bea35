"""Capacity SQL for PostgreSQL. Lanes are found by a loose index scan (one probe per agent)
and each lane's heads by one LATERAL probe, so a claim costs O(agents), not O(queue)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from capacity.domain.planner import NO_AGENT, Candidate
from capacity.store.base import LIVE_STATUSES, AgentConfig, ClaimTx

_LIVE = "ARRAY['" + "','".join(LIVE_STATUSES) + "']"

_DURABLE = f"""
SELECT runtime_task_id FROM attempts
WHERE owner_id = $1 AND runtime_instance_id = $2 AND status = ANY({_LIVE})
ORDER BY runtime_task_id"""

_LANES = """
WITH RECURSIVE lanes(agent_id) AS (
    SELECT min(agent_id) FROM runs WHERE owner_id = $1 AND status = 'queued'
  UNION ALL
    SELECT (SELECT min(r.agent_id) FROM runs r
            WHERE r.owner_id = $1 AND r.status = 'queued' AND r.agent_id > lanes.agent_id)
    FROM lanes WHERE lanes.agent_id IS NOT NULL
)
SELECT agent_id FROM lanes WHERE agent_id IS NOT NULL
UNION ALL
SELECT NULL WHERE EXISTS (
    SELECT 1 FROM runs WHERE owner_id = $1 AND status = 'queued' AND agent_id IS NULL)"""

_HEAD_COLUMNS = "r.id, r.agent_id, r.priority, r.run_now, r.queued_at_ms, r.execution_scope"
_LIVE_LIST = "('" + "','".join(LIVE_STATUSES) + "')"


def _eligible(labels: str, projects: str) -> str:
    """Queued runs this instance may take: of a project its runtime token serves (NULL:
    every project; docs/tenancy.md), not pinned elsewhere, every required label reported,
    and (a hint; re-checked under the scope locks) no live attempt in the scope. Filtering
    here, not after the LIMIT, keeps one blocked run from hiding those behind it."""
    return (
        "r.owner_id = $1 AND r.status = 'queued' "
        f"AND ({projects}::text[] IS NULL OR r.project_id = ANY({projects}::text[])) "
        "AND (r.pinned_runtime_instance_id IS NULL OR r.pinned_runtime_instance_id = $2) "
        f"AND r.required_labels::jsonb <@ {labels}::jsonb "
        "AND (r.execution_scope IS NULL OR NOT EXISTS (SELECT 1 FROM attempts s "
        f"WHERE s.execution_scope = r.execution_scope AND s.status IN {_LIVE_LIST}))"
    )


_ORDER = "ORDER BY r.run_now DESC, r.priority DESC, r.queued_at_ms, r.id LIMIT $3"
_HEADS = f"""
SELECT h.* FROM unnest($4::text[]) AS lane(agent_id)
CROSS JOIN LATERAL (
    SELECT {_HEAD_COLUMNS} FROM runs r
    WHERE {_eligible("$5", "$6")} AND r.agent_id = lane.agent_id {_ORDER}) h"""
_HEADS_NO_AGENT = (
    f"SELECT {_HEAD_COLUMNS} FROM runs r WHERE {_eligible('$4', '$5')} AND r.agent_id IS NULL "
    f"{_ORDER}"
)

# Joins against unnest(): "= ANY(list)" over a long list compares every row with every
# element; a join probes the index once per element.
_AGENTS = (
    "SELECT g.agent_id, g.concurrency, g.workspace_kind, g.workspace_path, g.fairness_weight, "
    "g.updated_at_ms FROM unnest($1::text[]) AS want(id) JOIN agents g ON g.agent_id = want.id"
)
_LIVE_PER_AGENT = f"""
SELECT a.agent_id, count(*) AS live FROM unnest($1::text[]) AS want(id)
JOIN attempts a ON a.agent_id = want.id AND a.status = ANY({_LIVE}) GROUP BY a.agent_id"""
_REPLACED = """
SELECT r.owner_id, r.runtime_instance_id, r.replaced_at_ms
FROM unnest($1::text[], $2::text[]) AS want(owner_id, instance_id)
JOIN runtime_instances r
  ON r.owner_id = want.owner_id AND r.runtime_instance_id = want.instance_id
WHERE r.replaced_at_ms IS NOT NULL"""
_OWNERS_WITH_RUNS = """
SELECT o.id FROM unnest($1::text[]) AS o(id) WHERE EXISTS (
    SELECT 1 FROM runs r WHERE r.owner_id = o.id AND r.project_id = ANY($2::text[]))"""
_BUSY_SCOPES = f"""
SELECT DISTINCT execution_scope FROM attempts
WHERE execution_scope = ANY($1::text[]) AND status = ANY({_LIVE})"""
_WAITS_FOR_SCOPE = f"""
SELECT 1 FROM runs r WHERE r.owner_id = $1 AND r.status = 'queued' AND EXISTS (
    SELECT 1 FROM attempts s WHERE s.execution_scope = r.execution_scope
      AND s.status IN {_LIVE_LIST}) LIMIT 1"""
#: The owner's clock (the row whose lane is NULL: a lane is never NULL) and its lanes' vtimes,
#: in one round trip.
_FAIRNESS = """
SELECT NULL::text AS lane, clock AS vtime FROM fair_clocks WHERE owner_id = $1
UNION ALL
SELECT f.lane, f.vtime FROM unnest($2::text[]) AS want(lane)
JOIN fair_lanes f ON f.owner_id = $1 AND f.lane = want.lane"""
#: The clock and the lanes' vtimes saved in one statement (no lanes: the clock alone).
_SAVE_FAIRNESS = """
WITH clock AS (
    INSERT INTO fair_clocks (owner_id, clock) VALUES ($1, $2)
    ON CONFLICT (owner_id) DO UPDATE SET clock = EXCLUDED.clock
)
INSERT INTO fair_lanes (owner_id, lane, vtime)
SELECT $1, lane, vtime FROM unnest($3::text[], $4::bigint[]) AS v(lane, vtime)
ON CONFLICT (owner_id, lane) DO UPDATE SET vtime = EXCLUDED.vtime"""
_PUT_AGENT = """
INSERT INTO agents (agent_id, concurrency, workspace_kind, workspace_path, fairness_weight,
                    updated_at_ms)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (agent_id) DO UPDATE SET concurrency = EXCLUDED.concurrency,
    workspace_kind = EXCLUDED.workspace_kind, workspace_path = EXCLUDED.workspace_path,
    fairness_weight = EXCLUDED.fairness_weight, updated_at_ms = EXCLUDED.updated_at_ms"""


def candidate_of(row: Any) -> Candidate:
    return Candidate(
        run_id=row["id"],
        agent_key=row["agent_id"] or NO_AGENT,
        priority=row["priority"],
        run_now=bool(row["run_now"]),
        queued_at_ms=row["queued_at_ms"],
        execution_scope=row["execution_scope"],
    )


def agent_config(row: Any) -> AgentConfig:
    return AgentConfig(
        agent_id=row["agent_id"],
        concurrency=row["concurrency"],
        workspace_kind=row["workspace_kind"],
        workspace_path=row["workspace_path"],
        fairness_weight=row["fairness_weight"],
        updated_at_ms=row["updated_at_ms"],
    )


class PostgresCapacitySql:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _fetch(self, tx: ClaimTx | None, sql: str, *args: Any) -> list[Any]:
        if tx is not None:
            return await tx.fetch(sql, *args)
        return list(await self._pool.fetch(sql, *args))

    async def durable_task_ids(self, tx: ClaimTx | None, owner: str, instance: str) -> list[str]:
        return [row[0] for row in await self._fetch(tx, _DURABLE, owner, instance)]

    async def lanes_with_work(self, tx: ClaimTx, owner: str) -> list[str | None]:
        return [row[0] for row in await tx.fetch(_LANES, owner)]

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
        named = [lane for lane in lanes if lane is not None]
        reported = json.dumps(sorted(set(labels)))
        served = None if projects is None else list(projects)
        rows = []
        if named:
            rows = await tx.fetch(_HEADS, owner, instance, per_lane, named, reported, served)
        if None in lanes:
            rows += await tx.fetch(_HEADS_NO_AGENT, owner, instance, per_lane, reported, served)
        return [candidate_of(row) for row in rows]

    async def agent_configs(
        self, tx: ClaimTx | None, agent_ids: Sequence[str]
    ) -> dict[str, AgentConfig]:
        if not agent_ids:  # a round of runs without agents: no round trip (as on SQLite)
            return {}
        rows = await self._fetch(tx, _AGENTS, list(agent_ids))
        return {row["agent_id"]: agent_config(row) for row in rows}

    async def agent_ids(self, limit: int) -> list[str]:
        rows = await self._pool.fetch(
            "SELECT agent_id FROM agents ORDER BY agent_id LIMIT $1", limit
        )
        return [row[0] for row in rows]

    async def replaced_instances(
        self, instances: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        owners, ids = [o for o, _ in instances], [i for _, i in instances]
        rows = await self._pool.fetch(_REPLACED, owners, ids)
        return {(row[0], row[1]): int(row[2]) for row in rows}

    async def owners_with_runs_in(self, owners: Sequence[str], projects: Sequence[str]) -> set[str]:
        rows = await self._pool.fetch(_OWNERS_WITH_RUNS, list(owners), list(projects))
        return {row[0] for row in rows}

    async def live_per_agent(self, tx: ClaimTx | None, agent_ids: Sequence[str]) -> dict[str, int]:
        if not agent_ids:
            return {}
        rows = await self._fetch(tx, _LIVE_PER_AGENT, list(agent_ids))
        return {row["agent_id"]: int(row["live"]) for row in rows}

    async def busy_scopes(self, tx: ClaimTx, scopes: Sequence[str]) -> set[str]:
        if not scopes:
            return set()
        return {row[0] for row in await tx.fetch(_BUSY_SCOPES, list(scopes))}

    async def waits_for_a_scope(self, tx: ClaimTx, owner: str) -> bool:
        return bool(await tx.fetch(_WAITS_FOR_SCOPE, owner))

    async def fairness(
        self, tx: ClaimTx, owner: str, lanes: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        rows = await tx.fetch(_FAIRNESS, owner, list(lanes))
        clock = next((r["vtime"] for r in rows if r["lane"] is None), 0)
        return clock, {r["lane"]: r["vtime"] for r in rows if r["lane"] is not None}

    async def save_fairness(
        self, tx: ClaimTx, owner: str, clock: int, vtimes: dict[str, int]
    ) -> None:
        lanes = sorted(vtimes)
        await tx.fetch(_SAVE_FAIRNESS, owner, clock, lanes, [vtimes[lane] for lane in lanes])

    async def put_agent(self, agent: AgentConfig) -> None:
        await self._pool.execute(
            _PUT_AGENT,
            agent.agent_id,
            agent.concurrency,
            agent.workspace_kind,
            agent.workspace_path,
            agent.fairness_weight,
            agent.updated_at_ms,
        )
