"""Short handles and kept action ids in the store and door, on SQLite and real PostgreSQL
(docs/long-tasks.md "One action contract and short handles"): the database itself refuses a
second task of an owner with one handle; an action id is kept in the transaction of its
change, so a second change with the same id rolls back whole; migration 0014 numbers the
tasks that existed before it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kernel.db.migrate import upgrade
from longtasks.domain.actions import Action, ActionRecord
from longtasks.domain.states import TaskState
from longtasks.store.action_sql import ActionTaken
from services.bootstrap import open_store
from tests.support.clock import Clock
from tests.support.longtasks import ANA, Harness, execute, harness, new_task, read, snapshot


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


async def test_the_database_refuses_one_handle_twice_for_an_owner(h: Harness) -> None:
    await h.door.create(new_task("lt-1"), ANA)
    await h.door.create(new_task("lt-2"), ANA)
    other = await h.door.create(new_task("lt-3", owner_id="bea"), ANA)
    assert other.task.handle == 1  # another owner's numbering
    before = await snapshot(h.store)
    with pytest.raises(Exception, match=r"(?i)unique"):
        await execute(h.store, "UPDATE long_tasks SET handle = 1 WHERE id = 'lt-2'")
    assert await snapshot(h.store) == before


async def test_an_action_id_is_kept_with_its_change_or_not_at_all(h: Harness) -> None:
    created = await h.door.create(new_task(), ANA)
    kept = ActionRecord("lt-1", "tap-1", Action.PAUSE, actor_type="user", actor_id="ana")
    await h.door.enqueue("lt-1", created.task.state_version, ANA)
    paused = await h.door.pause("lt-1", 2, ANA, action=kept)
    record = await h.sql.action("lt-1", "tap-1")
    assert record is not None and record.task_version == paused.task.state_version == 3
    resumed = await h.door.resume("lt-1", 3, ANA)
    before = await snapshot(h.store)
    with pytest.raises(ActionTaken):  # the same id again: the pause rolls back with it
        await h.door.pause("lt-1", resumed.task.state_version, ANA, action=kept)
    assert await snapshot(h.store) == before
    task = await h.sql.get_task("lt-1")
    assert task is not None and task.state is TaskState.QUEUED


async def test_migration_numbers_existing_tasks_per_owner(database_url: str) -> None:
    await upgrade(database_url, "0012_long_task_step_action")
    store = await open_store(database_url)
    try:
        columns = "id, project_id, owner_id, goal, state, state_version, plan_version, "
        columns += "max_attempts, max_verify_interruptions, max_corrections, event_sequence, "
        columns += "created_by, created_at_ms, updated_at_ms"
        for task_id, owner, at in (("x3", "ana", 30), ("x1", "ana", 10), ("y1", "bea", 20)):
            await execute(
                store,
                f"INSERT INTO long_tasks ({columns}) VALUES ('{task_id}', 'p', '{owner}', 'g', "
                f"'planned', 1, 1, 20, 3, 2, 1, 'ana', {at}, {at})",
            )
        await execute(
            store,
            f"INSERT INTO long_tasks ({columns}) VALUES ('x2', 'p', 'ana', 'g', "
            "'planned', 1, 1, 20, 3, 2, 1, 'ana', 10, 10)",
        )
    finally:
        await store.close()
    await upgrade(database_url)
    store = await open_store(database_url)
    try:
        rows = await read(store, "SELECT id, handle FROM long_tasks ORDER BY id")
        assert {r["id"]: r["handle"] for r in rows} == {"x1": 1, "x2": 2, "x3": 3, "y1": 1}
    finally:
        await store.close()
