"""Carrying out a plan (automations/domain/plan.py) inside one transaction opened through the
coordinator's door: the durable cancels, the runs (``Transitions.create_in``, idempotency key
``schedule:<id>:<fire time>``), the schedule's new state (compare-and-set on its version)
and its notes all commit together or not at all. A scheduler killed anywhere in here leaves
nothing behind, and the next replica finds the same fire still due."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from automations.domain.calendar import clock_text
from automations.domain.model import Fire, Note, OpenRun, Schedule, Source
from automations.domain.plan import Plan
from automations.store.sql import ScheduleSql
from coordinator.domain import commands as c
from coordinator.domain.display import explain
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType, ScopePolicy
from coordinator.service.transitions import DoorTx, Result, Transitions


@dataclass(frozen=True, slots=True)
class Carried:
    schedule: Schedule
    results: tuple[Result, ...]  # cancels and creations, to publish after the commit
    runs: tuple[tuple[Fire, str, bool], ...]  # (fire, run id, existing) per created fire
    notes: tuple[Note, ...] = ()  # what was recorded, in order


def fire_actor(schedule: Schedule, fire: Fire) -> Actor:
    """Who a fire's run is created by: the scheduler for the calendar, the trigger for a
    webhook delivery, the person for a backfill or a "fire now" (seed B §12.1)."""
    if fire.source is Source.SCHEDULE:
        return Actor(ActorType.SCHEDULER, schedule.trigger_id)
    if fire.source is Source.WEBHOOK:
        return Actor(ActorType.TRIGGER, schedule.trigger_id)
    return Actor(ActorType.USER, fire.actor_id)


def run_spec(
    schedule: Schedule, fire: Fire, extra: Mapping[str, object] | None = None
) -> c.RunSpec:
    t = schedule.template
    scope = t.execution_scope
    if scope is None and schedule.overlap.value == "cancel_previous":
        # The new run waits until the cancelled one provably ended: never two at once.
        scope = f"{schedule.trigger_id}@{schedule.project_id}"
    return c.RunSpec(
        project_id=schedule.project_id,
        owner_id=t.owner_id,
        task_id=t.task_id,
        created_by=fire_actor(schedule, fire),
        agent_id=t.agent_id,
        execution_scope=scope,
        scope_policy=ScopePolicy.QUEUE,
        trigger_type=fire.source.value,
        trigger_id=schedule.trigger_id,
        idempotency_key=fire.key,
        priority=t.priority,
        max_attempts=t.max_attempts,
        idempotent=t.idempotent,
        required_labels=t.required_labels,
        spec={
            **t.spec,
            **(extra or {}),
            "schedule": {"id": schedule.schedule_id, "fire_time_ms": fire.fire_ms},
        },
    )


async def open_runs(tx: DoorTx, schedule: Schedule) -> tuple[OpenRun, ...]:
    """The schedule's earlier runs that are not finished, as a person would name them
    (``unknown`` is not finished: truerun cannot prove the run ended)."""
    found = []
    for run_id in schedule.open_runs:
        loaded = await tx.load(run_id)
        if loaded is None or loaded.run.status.terminal:
            continue
        shown = explain(loaded.run, loaded.attempt)
        found.append(
            OpenRun(
                run_id,
                _fire_time(loaded.run.idempotency_key) or loaded.run.created_at_ms,
                shown.state.value,
                shown.since_ms,
            )
        )
    return tuple(found)


def _fire_time(key: str | None) -> int | None:
    tail = (key or "").rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


async def carry_out(
    transitions: Transitions,
    sql: ScheduleSql,
    tx: DoorTx,
    before: Schedule,
    still_open: tuple[OpenRun, ...],
    plan: Plan,
    actor: tuple[str, str],
    now_ms: int,
    extra: Mapping[str, object] | None = None,
) -> Carried:
    results: list[Result] = []
    notes: list[Note] = list(plan.notes)
    for run_id in plan.cancels:
        cancel = c.RequestCancel(
            run_id,
            Actor(ActorType.SCHEDULER, before.trigger_id),
            reason=f"superseded by a newer fire of {before.trigger_id} (cancel_previous)",
        )
        results.append(await transitions.execute_in(tx, cancel))
    created: list[str] = []
    runs: list[tuple[Fire, str, bool]] = []
    schedule = plan.schedule
    zone = schedule.calendar.time_zone if schedule.calendar is not None else "UTC"
    for fire in plan.creates:
        result = await transitions.create_in(tx, run_spec(schedule, fire, extra))
        results.append(result)
        runs.append((fire, result.run.id, result.existing))
        at = clock_text(fire.fire_ms, zone)
        if result.existing:
            outcome = f"{at} already has run {result.run.id}"
        else:
            created.append(result.run.id)
            outcome = f"fired {at} ({fire.source.value}): run {result.run.id}"
        notes.append(Note("fired", outcome, fire_ms=fire.fire_ms, run_id=result.run.id))
        schedule = replace(schedule, last_run_id=result.run.id, last_outcome=outcome)
    schedule = replace(
        schedule,
        version=before.version + 1,
        updated_at_ms=now_ms,
        open_runs=tuple(run.run_id for run in still_open if run.run_id not in plan.cancels)
        + tuple(plan.cancels)
        + tuple(created),
    )
    await sql.update(tx, schedule, before.version)
    await sql.append(tx, schedule, notes, actor, now_ms)
    return Carried(schedule, tuple(results), tuple(runs), tuple(notes))
