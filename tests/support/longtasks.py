"""The long-task contract suites' shared pieces: a harness over one store (its own
connections), a task spec, driving a task to a running attempt, and raw reads of every
long-task row (to show that a refused command changed nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.store.base import RunStore
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SqliteStore
from kernel.db.longtask_tables import LONG_TASK_TABLES
from longtasks.domain.model import StepDraft
from longtasks.domain.states import SideEffect
from longtasks.service.door import LongTaskDoor
from longtasks.service.inputs import Changed, NewCriterion, NewTask
from longtasks.store.sql import LongTaskSql
from services.bootstrap import Coordinator, coordinator, long_tasks, longtask_sql
from tests.support.clock import Clock

ANA = Actor(ActorType.USER, "ana")
SCHEDULER = Actor(ActorType.SCHEDULER, "long-task-scheduler")


@dataclass
class Harness:
    store: RunStore
    app: Coordinator
    door: LongTaskDoor
    sql: LongTaskSql
    clock: Clock


def harness(store: RunStore, clock: Clock) -> Harness:
    """The door as the composition root builds it, over the same statements the test reads
    (and may fault) through ``sql``."""
    app = coordinator(store, clock=clock)
    sql = longtask_sql(store)
    door = LongTaskDoor(app.transitions, sql, clock=clock)
    assert type(door) is type(long_tasks(app, clock=clock))
    return Harness(store, app, door, sql, clock)


def new_task(task_id: str = "lt-1", **overrides: Any) -> NewTask:
    """Three steps (pure, non-idempotent, idempotent) and two criteria: a deterministic one
    and a subjective optional one."""
    values: dict[str, Any] = {
        "project_id": "proj",
        "owner_id": "ana",
        "goal": "send the weekly report",
        "steps": (
            StepDraft("s1", "write the report", SideEffect.PURE),
            StepDraft("s2", "send the email", SideEffect.NON_IDEMPOTENT),
            StepDraft("s3", "archive it", SideEffect.IDEMPOTENT, idempotency_key="archive-1"),
        ),
        "criteria": (
            NewCriterion("c1", "the report file exists", "file_exists", '{"path": "r.md"}'),
            NewCriterion("c2", "the report reads well", required=False),
        ),
        "constraints": ("no attachments over 5 MB",),
        "task_id": task_id,
    }
    values.update(overrides)
    return NewTask(**values)


async def running(h: Harness, spec: NewTask | None = None) -> Changed:
    """A task created, enqueued and started: ``made`` is the attempt, ``run_id`` its run."""
    created = await h.door.create(spec or new_task(), ANA)
    task_id = created.task.id
    queued = await h.door.enqueue(task_id, created.task.state_version, ANA)
    return await h.door.start_attempt(task_id, SCHEDULER, queued.task.state_version)


async def step_version(h: Harness, task_id: str, step_id: str) -> int:
    task = await h.sql.get_task(task_id)
    assert task is not None
    steps = await h.sql.steps(None, task_id, task.plan_version)
    return next(s.version for s in steps if s.step_id == step_id)


async def read(store: RunStore, sql: str) -> list[Any]:
    if isinstance(store, PostgresStore):
        return list(await store.pool.fetch(sql))
    assert isinstance(store, SqliteStore)
    return await store.read(sql)


async def execute(store: RunStore, sql: str) -> None:
    if isinstance(store, PostgresStore):
        await store.pool.execute(sql)
    else:
        assert isinstance(store, SqliteStore)
        await store.write(sql)


async def snapshot(store: RunStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every long-task table, and the runs: what a refused command must leave
    exactly as it was."""
    tables = [t.name for t in LONG_TASK_TABLES] + ["runs"]
    out = {}
    for table in tables:
        rows = await read(store, f"SELECT * FROM {table}")
        out[table] = sorted((tuple(sorted(dict(row).items())) for row in rows), key=repr)
    return out
