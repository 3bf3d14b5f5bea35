"""The statements that must stay O(page) or O(queue) use their index (docs/indexes.md).

Checked on a seeded PostgreSQL database with generic plans (``force_generic_plan``, PREPARE
+ EXPLAIN EXECUTE), the plans the store's prepared statements may run with whatever values
they get. The list of indexes itself is pinned in test_migrations.py, on both databases.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from capacity.store import postgres as capacity_sql
from coordinator.store.base import RunCursor, RunFilter, Scan
from coordinator.store.postgres import sql
from coordinator.store.sql import TERMINAL_STATUSES
from kernel.db.migrate import upgrade
from tests.support.databases import create_pg_database, drop_pg_database

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.postgres]

RUNS = 20_000
EVENTS_PER_RUN = 5
PROJECTS = 20
# 20000 runs created 1s apart from T0, the newest 1000 queued, a few hundred live or waiting.
T0 = 1_000_000
LEASE_T0 = 99_000_000_000
SEED = f"""
INSERT INTO runs (id, project_id, owner_id, task_id, agent_id, execution_scope, trigger_type,
  idempotency_key, priority, run_now, required_labels, status, version, event_sequence,
  current_attempt_id, attempt_count, created_by, created_at_ms, updated_at_ms, queued_at_ms)
SELECT 'r' || lpad(g::text, 7, '0'), 'p' || (g % {PROJECTS}), 'o' || (g % 3), 't' || (g % 500),
  CASE WHEN g % 10 = 0 THEN NULL ELSE 'a' || (g % 8) END,
  CASE WHEN g % 5 = 0 THEN 's' || (g % 200) END, 'api', CASE WHEN g % 3 = 0 THEN 'k' || g END,
  g % 3, g % 50 = 0, '[]', s.status, 10, {EVENTS_PER_RUN},
  CASE WHEN s.status NOT IN ('queued', 'pending_approval') THEN 'a' || lpad(g::text, 7, '0') END,
  CASE WHEN s.status NOT IN ('queued', 'pending_approval') THEN 1 ELSE 0 END,
  'u', {T0} + g * 1000, {T0} + g * 1000 + 500, {T0} + g * 1000 + 10
FROM generate_series(1, {RUNS}) g
CROSS JOIN LATERAL (SELECT CASE
  WHEN g > {RUNS - 1000} THEN 'queued' WHEN g > {RUNS - 1200} THEN 'running'
  WHEN g > {RUNS - 1250} THEN 'dispatching' WHEN g > {RUNS - 1300} THEN 'retry_wait'
  WHEN g % 10 = 1 THEN 'failed' WHEN g % 20 = 2 THEN 'cancelled'
  ELSE 'succeeded' END AS status) s;
INSERT INTO attempts (id, run_id, attempt_no, owner_id, agent_id, execution_scope,
  runtime_task_id, status, observed_state, observed_at_ms, sync_state, runtime_instance_id,
  lease_token, lease_expires_at_ms, created_at_ms, updated_at_ms)
SELECT current_attempt_id, id, 1, owner_id, agent_id, execution_scope, 't-' || id,
  CASE status WHEN 'dispatching' THEN 'claimed' WHEN 'retry_wait' THEN 'failed'
    ELSE status END,
  'unconfirmed', updated_at_ms, CASE WHEN right(id, 2) = '07' THEN 'stale' ELSE 'in_sync' END,
  'inst-' || owner_id, CASE WHEN status IN ('running', 'dispatching') THEN 'tok' END,
  CASE WHEN status IN ('running', 'dispatching') THEN {LEASE_T0} + substr(id, 2)::int END,
  created_at_ms, updated_at_ms
FROM runs WHERE current_attempt_id IS NOT NULL;
INSERT INTO run_events (id, run_id, sequence, type, dedupe_key, actor_type, payload,
  created_at_ms, project_id, tx_id)
SELECT 'e' || substr(r.id, 2) || '-' || s, r.id, s, 'T' || s,
  CASE WHEN s = 1 AND right(r.id, 1) = '3' THEN 'd' || r.id END, 'system', '{{}}',
  r.created_at_ms + s, r.project_id, 1000 + substr(r.id, 2)::int * 3 + s / 4
FROM runs r CROSS JOIN generate_series(1, {EVENTS_PER_RUN}) s ORDER BY r.id, s;
"""

LIVE_LEASE = LEASE_T0 + RUNS - 1100  # about half the live leases expired
OLD = T0 + (RUNS - 1000) * 1000
CURSOR = 1000 + (RUNS - 2000) * 3  # the feed's cursor 2000 runs from the end
LANES = ["a1", "a2", "a3"]


def _list_runs(run_filter: RunFilter, after: RunCursor | None = None) -> tuple[str, list[Any]]:
    return sql.list_runs_sql(run_filter, after, 51)


# (statement, its arguments, the index its plan must use): the reads that must stay
# O(page) or O(queue), and the uniqueness probes of the writes.
PLANS: dict[str, tuple[str, list[Any], str | tuple[str, ...]]] = {
    "claim lanes": (capacity_sql._LANES, ["o0"], "ix_runs_claim_order"),
    "claim heads": (
        capacity_sql._HEADS,
        ["o0", "inst-o0", 1, LANES, "[]", ["p0", "p1"]],
        "ix_runs_claim_order",
    ),
    "claim heads, no agent": (
        capacity_sql._HEADS_NO_AGENT,
        ["o0", "inst-o0", 1, "[]", None],
        "ix_runs_claim_order",
    ),
    "queue position": (
        sql.QUEUE_POSITION,
        ["o0", 0, 1, OLD + 49_000, f"r{RUNS - 951:07d}", "p4"],
        "ix_runs_claim_order",
    ),
    "durable task ids": (capacity_sql._DURABLE, ["o0", "inst-o0"], "ix_attempts_runtime_capacity"),
    "started attempts": (sql.STARTED_ATTEMPTS, ["o0", "inst-o0"], "ix_attempts_runtime_capacity"),
    "live per agent": (capacity_sql._LIVE_PER_AGENT, [LANES], "ix_attempts_agent_status"),
    "busy scopes": (capacity_sql._BUSY_SCOPES, [["s5", "s10"]], "ix_attempts_scope_status"),
    "open in scope": (sql.OPEN_IN_SCOPE, ["s5", TERMINAL_STATUSES], "ix_runs_scope_status"),
    "expired leases": (sql.EXPIRED_LEASES, [LIVE_LEASE, 100], "ix_attempts_status_lease"),
    "silent unknowns": (sql.SILENT_UNKNOWNS, [LIVE_LEASE, 100], "ix_attempts_status_lease"),
    "scan expired leases": (
        sql.SCANS[Scan.EXPIRED_LEASES],
        [LIVE_LEASE, ["x"], 100],
        "ix_attempts_status_lease",
    ),
    "scan silent unknowns": (
        sql.SCANS[Scan.SILENT_UNKNOWNS],
        [LIVE_LEASE, ["x"], 100],
        "ix_attempts_status_lease",
    ),
    "due retries": (sql.DUE_RETRIES, [OLD, 100], "ix_runs_status_queued"),
    "queued by project": (sql.QUEUED_BY_PROJECT, [], "ix_runs_status_queued"),
    "list runs, project": (*_list_runs(RunFilter(project_id="p1")), "ix_runs_project_created"),
    "list runs, project, page 2": (
        *_list_runs(RunFilter(project_id="p1"), RunCursor(OLD, f"r{RUNS - 1000:07d}")),
        "ix_runs_project_created",
    ),
    "list runs, owner": (*_list_runs(RunFilter(owner_id="o1")), "ix_runs_owner_created"),
    "list runs, task": (*_list_runs(RunFilter(task_id="t7")), "ix_runs_task_created"),
    "find by idempotency key": (sql.FIND_BY_KEY, ["p3", "k3"], "uq_runs_project_idempotency_key"),
    "run events": (sql.LIST_EVENTS, [f"r{RUNS - 1:07d}", 0, 101], "pk_run_events"),
    # Both feed indexes read run_events in (tx_id, position) order; with 20 equal projects the
    # generic plan's estimate for one project (1/20 of the rows) sits near the point where
    # walking the feed index and filtering is as cheap, so ANALYZE's sample decides. Either
    # is an index scan of a page, never a scan of the table (asserted below).
    "project feed": (
        sql.PROJECT_EVENTS,
        ["p1", CURSOR, 0, 101],
        ("ix_run_events_project_id_tx_id_position", "ix_run_events_tx_id_position"),
    ),
    "feed": (sql.ALL_EVENTS, [CURSOR, 0, 101], "ix_run_events_tx_id_position"),
    "feed head": (sql.LAST_EVENT_CURSOR, [], "ix_run_events_tx_id_position"),
    "dedupe probe": (
        sql.LOAD,
        [f"r{RUNS - 7:07d}", None, f"dr{RUNS - 7:07d}"],
        "uq_run_events_run_dedupe_key",
    ),
}
RUN_TABLES = {"runs", "attempts", "run_events"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def seeded() -> AsyncIterator[asyncpg.Connection]:
    """A migrated, seeded PostgreSQL database, analyzed, with generic plans forced."""
    url = await create_pg_database()
    try:
        await upgrade(url)
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(SEED)
            await conn.execute("VACUUM ANALYZE runs, attempts, run_events")
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            yield conn
        finally:
            await conn.close()
    finally:
        await drop_pg_database(url)


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return "ARRAY[" + ", ".join(_literal(v) for v in value) + "]" if value else "'{}'"


async def generic_plan(conn: asyncpg.Connection, statement: str, args: list[Any]) -> Any:
    """The statement's generic plan (JSON): EXPLAIN EXECUTE takes no bind parameters, so the
    arguments go in as literals cast to the types the server inferred."""
    prepared = await conn.prepare(statement)
    types = [
        f"{t.name[1:]}[]" if t.name.startswith("_") else t.name for t in prepared.get_parameters()
    ]
    params = f"({', '.join(types)})" if types else ""
    await conn.execute(f"PREPARE plan_under_test{params} AS {statement}")
    try:
        values = ", ".join(f"{_literal(a)}::{t}" for a, t in zip(args, types, strict=True))
        call = f"EXECUTE plan_under_test({values})" if types else "EXECUTE plan_under_test"
        return json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {call}"))[0]["Plan"]
    finally:
        await conn.execute("DEALLOCATE plan_under_test")


def scans(plan: Any) -> list[tuple[str, str]]:
    """(node type, index or table) of every scan in the plan."""
    found = []
    if "Index Name" in plan:
        found.append((plan["Node Type"], plan["Index Name"]))
    elif plan["Node Type"] == "Seq Scan":
        found.append(("Seq Scan", plan["Relation Name"]))
    for child in plan.get("Plans", []):
        found += scans(child)
    return found


@pytest.mark.parametrize("name", sorted(PLANS))
async def test_statement_plan_uses_its_index(seeded: asyncpg.Connection, name: str) -> None:
    statement, args, index = PLANS[name]
    found = scans(await generic_plan(seeded, statement, args))
    wanted = {index} if isinstance(index, str) else set(index)
    assert wanted & {used for _, used in found}, found
    assert not [t for kind, t in found if kind == "Seq Scan" and t in RUN_TABLES], found
