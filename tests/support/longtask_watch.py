"""The long-task watcher's contract tests' shared pieces (tests/contract/
test_longtask_watcher.py): a watcher over a harness, tasks queued in creation order, and the
coordinator's normal paths that end a run (a runtime's result, a person's cancel)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from coordinator.domain import commands as c
from coordinator.domain.model import Attempt
from coordinator.domain.states import RunStatus
from longtasks.domain.model import PlanStep
from longtasks.domain.states import TaskState
from longtasks.service.watcher import LongTaskWatcher
from services.bootstrap import longtask_watcher_sql
from services.metrics import Metrics
from tests.support.factories import SCHEDULER as CAPACITY
from tests.support.factories import USER, evidence
from tests.support.longtasks import ANA, Harness, new_task


def watcher(
    h: Harness, cap: int = 4, name: str = "w1", metrics: Metrics | None = None
) -> LongTaskWatcher:
    return LongTaskWatcher(
        h.door,
        longtask_watcher_sql(h.store),
        name=name,
        owner_concurrency=cap,
        on_action=metrics.long_task_action if metrics else None,
    )


async def queued(h: Harness, task_id: str = "lt-1", **overrides: object) -> None:
    """A task created and enqueued (one ms after the last, so creation order is clear)."""
    h.clock.now += 1
    created = await h.door.create(new_task(task_id, **overrides), ANA)
    await h.door.enqueue(task_id, created.task.state_version, ANA)


async def state(h: Harness, task_id: str = "lt-1") -> TaskState:
    task = await h.sql.get_task(task_id)
    assert task is not None
    return task.state


async def step(h: Harness, step_id: str, task_id: str = "lt-1") -> PlanStep:
    task = await h.sql.get_task(task_id)
    assert task is not None
    return next(
        s for s in await h.sql.steps(None, task_id, task.plan_version) if s.step_id == step_id
    )


async def lease(h: Harness, task_id: str = "lt-1") -> tuple[str, str]:
    """The attempt holding the task's lease and its run."""
    task = await h.sql.get_task(task_id)
    assert task is not None and task.lease is not None
    return task.lease.attempt_id, task.lease.run_id


async def run_status(h: Harness, run_id: str) -> RunStatus:
    loaded = await h.store.load(run_id)
    assert loaded is not None
    return loaded.run.status


async def fence(h: Harness, run_id: str) -> Attempt:
    """The run claimed by a runtime instance and its start fenced (status dispatching)."""
    t = h.app.transitions
    await t.execute(c.Claim(run_id, CAPACITY, runtime_instance_id="inst-1"))
    fenced = await t.execute(c.StartFence(run_id, CAPACITY, callback_token_hash="h"))
    assert fenced.attempt is not None
    return fenced.attempt


async def fail_through_the_runtime(h: Harness, run_id: str) -> None:
    """The coordinator's normal path: claimed, start fenced, reported running, then failed."""
    t = h.app.transitions
    attempt = await fence(h, run_id)
    await t.execute(evidence(c.RuntimeRunning, attempt, 1, turn_active=True))
    await t.execute(
        evidence(
            c.RuntimeResult,
            attempt,
            2,
            outcome=c.RuntimeOutcome.FAILED,
            exit_code=1,
            error_code="exit_1",
            error_summary="the agent crashed",
        )
    )
    assert await run_status(h, run_id) is RunStatus.FAILED


async def cancel_run(h: Harness, run_id: str) -> None:
    """A person cancels the unclaimed run: it ends ``cancelled`` at once."""
    await h.app.transitions.execute(c.RequestCancel(run_id, USER, reason="not needed"))
    assert await run_status(h, run_id) is RunStatus.CANCELLED


async def events(h: Harness, task_id: str) -> list[tuple[str, str | None]]:
    return [(e.type, e.attempt_id) for e in await h.sql.events(task_id)]


async def attempts_of(h: Harness, task_id: str, count: int) -> bool:
    return len(await h.sql.attempts(None, task_id)) >= count


async def until(condition: Callable[[], Awaitable[bool]], deadline_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not await condition():
        assert loop.time() < end, "condition not met before the deadline"
        await asyncio.sleep(0.02)
