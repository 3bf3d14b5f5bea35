"""Schedules on SQLite and real PostgreSQL (seed B §21 item 1 over both paths): a fire
claimed by three scheduler replicas at once and one webhook delivery sent five times at
once each create exactly one run; overlap decisions see real runs queued, running,
unknown and finished."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

import pytest

from automations.domain.calendar import Calendar, Interval
from automations.domain.model import Catchup, Overlap, Schedule, Template
from automations.domain.webhooks import sign
from automations.service.retention import EventRetention
from automations.service.scheduler import Scheduler
from automations.service.schedules import Schedules
from coordinator.domain import commands as c
from coordinator.domain.states import RunStatus
from coordinator.store.base import RunFilter, RunStore
from kernel.errors import InvalidArgument, WebhookSignatureInvalid
from services.bootstrap import (
    Coordinator,
    coordinator,
    open_store,
    schedule_sql,
    scheduler,
    schedules,
)
from services.metrics import Metrics
from tests.support.clock import START, Clock
from tests.support.factories import RUNTIME, SCHEDULER

STEP = 1_000
KEY = "webhook-key"


@dataclass
class Replica:
    store: RunStore
    app: Coordinator
    scheduler: Scheduler
    schedules: Schedules


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def replicas(
    migrated_database_url: str, clock: Clock
) -> AsyncIterator[Callable[[int], asyncio.Future[list[Replica]]]]:
    """``make(n)``: n replicas, each with its own store (its own connections)."""
    opened: list[RunStore] = []

    async def make(n: int) -> list[Replica]:
        made = []
        for i in range(n):
            store = await open_store(migrated_database_url)
            opened.append(store)
            app = coordinator(store, clock=clock)
            made.append(
                Replica(
                    store,
                    app,
                    scheduler(app, f"replica-{i}", clock=clock),
                    schedules(app, KEY, clock=clock),
                )
            )
        return made

    yield make  # type: ignore[misc]
    for store in opened:
        await store.close()


def every_second(
    schedule_id: str = "tick",
    overlap: Overlap = Overlap.ALLOW_ALL,
    webhook: bool = False,
) -> Schedule:
    return Schedule(
        "proj",
        schedule_id,
        0,
        Template("alice", "task"),
        Calendar(Interval(STEP)),
        overlap=overlap,
        catchup=Catchup.ALL,
        webhook_generation=1 if webhook else 0,
    )


async def runs_of(store: RunStore, schedule_id: str) -> list[str]:
    loaded = await store.list_runs(RunFilter(project_id="proj"), None, 10_000)
    return sorted(
        item.run.idempotency_key or ""
        for item in loaded
        if item.run.trigger_id == f"schedule:{schedule_id}"
    )


async def test_a_fire_claimed_by_three_replicas_at_once_creates_one_run(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    three = await replicas(3)
    await three[0].schedules.create(every_second(), ("user", "ana"))
    fires = 10
    for _ in range(fires):
        clock.now += STEP
        handled = await asyncio.gather(*(r.scheduler.one() for r in three))
        assert any(handled)
    keys = await runs_of(three[0].store, "tick")
    expected = [f"schedule:tick:{START + STEP * (i + 1)}" for i in range(fires)]
    print(f"fires {fires}, runs {len(keys)}, distinct keys {len(set(keys))}")
    assert keys == sorted(expected)
    state = await three[1].schedules.get("proj", "tick")
    assert state.next_fire_ms == START + STEP * (fires + 1)
    assert state.last_fire_ms == START + STEP * fires


async def test_the_same_webhook_delivery_sent_five_times_at_once_creates_one_run(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    five = await replicas(5)
    _, secret = await five[0].schedules.create(every_second("hook", webhook=True), ("user", "ana"))
    assert secret.startswith("whsec_")
    body = b'{"ref": "main", "token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}'
    signature = sign(secret, clock.now, "delivery-1", body)
    answers = await asyncio.gather(
        *(r.schedules.deliver("proj", "hook", "delivery-1", signature, body) for r in five)
    )
    run_ids = {answer.runs[0][1] for answer in answers}
    assert len(run_ids) == 1
    assert sum(not answer.runs[0][2] for answer in answers) == 1  # one created, four found it
    assert await runs_of(five[0].store, "hook") == ["schedule:hook:delivery:delivery-1"]
    loaded = await five[0].store.load(run_ids.pop())
    assert loaded is not None
    payload = loaded.run.spec["webhook"]["payload"]
    assert payload["ref"] == "main" and "ghp_" not in str(payload)  # secret-shaped: redacted


async def _drive(app: Coordinator, run_id: str, to: str) -> None:
    """Bring a run to ``running`` (runtime evidence), ``unknown`` (start outcome unknown)
    or ``finished`` (cancelled before it started)."""
    t = app.transitions
    if to == "finished":
        await t.execute(c.RequestCancel(run_id, SCHEDULER))
        return
    await t.execute(c.Claim(run_id, SCHEDULER, runtime_instance_id="inst-1"))
    fenced = await t.execute(c.StartFence(run_id, SCHEDULER, callback_token_hash="h"))
    attempt = fenced.attempt
    assert attempt is not None
    if to == "unknown":
        await t.execute(c.DispatchUnknown(run_id, SCHEDULER, explanation="no answer to Start"))
        return
    await t.execute(
        c.RuntimeRunning(
            run_id=run_id,
            attempt_id=attempt.id,
            runtime_task_id=attempt.runtime_task_id,
            seq=1,
            actor=RUNTIME,
            turn_active=True,
        )
    )


@pytest.mark.parametrize("previous", ["running", "unknown", "finished"])
async def test_skip_sees_a_running_or_unknown_run_as_not_finished(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock, previous: str
) -> None:
    (one,) = await replicas(1)
    await one.schedules.create(every_second("skip", Overlap.SKIP), ("user", "ana"))
    clock.now += STEP
    assert await one.scheduler.one()
    first = (await one.schedules.get("proj", "skip")).last_run_id
    assert first is not None
    await _drive(one.app, first, previous)
    clock.now += STEP
    assert await one.scheduler.one()
    keys = await runs_of(one.store, "skip")
    events = await one.schedules.events("proj", "skip", 0, 10)
    if previous == "finished":
        assert len(keys) == 2
        assert events[0].type == "fired"
    else:
        assert len(keys) == 1
        assert events[0].type == "skipped"
        words = f"skipped 08:00:02: the 08:00:01 run is still {previous}"
        assert events[0].message.startswith(words)


async def test_cancel_previous_cancels_through_the_durable_cancel_and_queues_behind_it(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    (one,) = await replicas(1)
    await one.schedules.create(every_second("cp", Overlap.CANCEL_PREVIOUS), ("user", "ana"))
    clock.now += STEP
    await one.scheduler.one()
    first = (await one.schedules.get("proj", "cp")).last_run_id
    assert first is not None
    await _drive(one.app, first, "running")
    clock.now += STEP
    await one.scheduler.one()
    old = await one.store.load(first)
    assert old is not None and old.run.cancel_requested_at_ms is not None
    assert old.run.status is RunStatus.RUNNING  # asked, not assumed: the runtime confirms
    second = (await one.schedules.get("proj", "cp")).last_run_id
    assert second is not None and second != first
    new = await one.store.load(second)
    assert new is not None and new.run.execution_scope == old.run.execution_scope is not None


@pytest.mark.parametrize("overlap", [Overlap.ALLOW_ALL, Overlap.SKIP])
async def test_a_backfill_twice_keeps_one_run_per_fire_time(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock, overlap: Overlap
) -> None:
    """The second backfill finds every fire time's run (existing), never a skip, whatever
    the overlap policy (the first one's runs are still open)."""
    (one,) = await replicas(1)
    await one.schedules.create(every_second("bf"), ("user", "ana"))
    clock.now += 10 * STEP
    first = await one.schedules.backfill(
        "proj", "bf", START - 5 * STEP, START - STEP, Overlap.ALLOW_ALL, ("user", "ana")
    )
    again = await one.schedules.backfill(
        "proj", "bf", START - 5 * STEP, START - STEP, overlap, ("user", "ana")
    )
    assert [r[1] for r in first.runs] == [r[1] for r in again.runs]
    assert [r[2] for r in first.runs] == [False] * 5
    assert [r[2] for r in again.runs] == [True] * 5
    assert len(await runs_of(one.store, "bf")) == 5


@pytest.mark.parametrize("catchup", [Catchup.ONE, Catchup.ALL])
async def test_a_stop_across_fires_runs_those_inside_the_window_and_records_the_rest(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock, catchup: Catchup
) -> None:
    """Stopped for 20 fires with a 5 s catch-up window: the 15 older fires are recorded as
    missed (never run), the 5 inside the window run (each, or coalesced into the last)."""
    (one,) = await replicas(1)
    schedule = Schedule(
        "proj",
        "cu",
        0,
        Template("alice", "task"),
        Calendar(Interval(STEP)),
        overlap=Overlap.ALLOW_ALL,
        catchup=catchup,
        catchup_window_ms=5 * STEP - 1,
    )
    await one.schedules.create(schedule, ("user", "ana"))
    clock.now += 20 * STEP  # truerun was not running: fires START+1s .. START+20s are due
    assert await one.scheduler.one()
    keys = await runs_of(one.store, "cu")
    inside = [START + STEP * i for i in range(16, 21)]
    expected = inside if catchup is Catchup.ALL else inside[-1:]
    assert keys == sorted(f"schedule:cu:{t}" for t in expected)
    notes = {e.type: e.message for e in await one.schedules.events("proj", "cu", 0, 50)}
    assert notes["missed"].startswith(
        "missed 15 fires while truerun was not running or the schedule was paused, "
        "first 08:00:01, last 08:00:15"
    )
    if catchup is Catchup.ONE:
        assert notes["coalesced"] == "coalesced 4 late fires (08:00:16..08:00:19) into 08:00:20"
    else:
        assert "coalesced" not in notes
    state = await one.schedules.get("proj", "cu")
    assert state.missed_total == 15 and state.next_fire_ms == START + 21 * STEP


async def test_a_paused_schedule_records_a_delivery_and_runs_nothing(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    (one,) = await replicas(1)
    _, secret = await one.schedules.create(every_second("ph", webhook=True), ("user", "ana"))
    await one.schedules.pause("proj", "ph", "vendor outage", ("user", "ana"))
    body = b"{}"
    fired = await one.schedules.deliver(
        "proj", "ph", "d-9", sign(secret, clock.now, "d-9", body), body
    )
    assert fired.runs == ()
    assert fired.notes == ("skipped delivery d-9: paused by ana: vendor outage",)
    assert await runs_of(one.store, "ph") == []
    manual = await one.schedules.fire_now("proj", "ph", "req-1", ("user", "ana"))
    assert len(manual.runs) == 1  # a person's "fire now" still runs while paused


async def test_fire_now_repeated_with_its_request_id_returns_the_first_fire(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    (one,) = await replicas(1)
    await one.schedules.create(every_second("fn", Overlap.SKIP), ("user", "ana"))
    first = await one.schedules.fire_now("proj", "fn", "req-7", ("user", "ana"))
    clock.now += 5 * STEP
    again = await one.schedules.fire_now("proj", "fn", "req-7", ("user", "ana"))
    assert [(f.fire_ms, run, existing) for f, run, existing in again.runs] == [
        (START, first.runs[0][1], True)
    ]


async def test_scheduler_decisions_are_counted_for_operators(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    (one,) = await replicas(1)
    metrics = Metrics()
    loop = scheduler(one.app, "metered", clock=clock, metrics=metrics)
    await one.schedules.create(every_second("m", Overlap.SKIP), ("user", "ana"))
    clock.now += STEP
    await loop.one()  # fired
    clock.now += STEP
    await loop.one()  # skipped: the first run is still queued
    text = metrics.exposition()
    assert 'truerun_schedule_decision_total{decision="fired"} 1.0' in text
    assert 'truerun_schedule_decision_total{decision="skipped"} 1.0' in text


async def test_a_rotated_webhook_secret_replaces_the_old_one_and_off_stays_off(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    (one,) = await replicas(1)
    _, old = await one.schedules.create(every_second("rot", webhook=True), ("user", "ana"))
    rotated, new = await one.schedules.rotate_webhook_secret("proj", "rot", ("user", "ana"))
    assert new.startswith("whsec_") and new != old
    body = b"{}"
    with pytest.raises(WebhookSignatureInvalid):
        await one.schedules.deliver("proj", "rot", "a", sign(old, clock.now, "a", body), body)
    fired = await one.schedules.deliver("proj", "rot", "b", sign(new, clock.now, "b", body), body)
    assert len(fired.runs) == 1
    # Off through an update, then on again only by rotating: never the earlier secret.
    off = await one.schedules.update(
        replace(rotated, webhook_generation=0), fired.schedule.version, ("user", "ana")
    )
    assert not off.webhook_enabled
    with pytest.raises(WebhookSignatureInvalid):
        await one.schedules.deliver("proj", "rot", "c", sign(new, clock.now, "c", body), body)
    with pytest.raises(InvalidArgument):
        await one.schedules.update(replace(off, webhook_generation=1), off.version, ("user", "ana"))
    _, third = await one.schedules.rotate_webhook_secret("proj", "rot", ("user", "ana"))
    assert third not in (old, new)
    fired = await one.schedules.deliver("proj", "rot", "d", sign(third, clock.now, "d", body), body)
    assert len(fired.runs) == 1


async def test_old_schedule_events_go_and_each_schedule_keeps_its_newest(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    (one,) = await replicas(1)
    await one.schedules.create(every_second("old"), ("user", "ana"))  # event 1: created
    for _ in range(3):  # events 2..4: fired
        clock.now += STEP
        await one.scheduler.one()
    await one.schedules.create(every_second("quiet"), ("user", "ana"))  # its only event
    clock.now += 10 * 24 * 3600 * 1000  # ten days later
    clock.now -= clock.now % STEP
    await one.schedules.pause("proj", "old", "", ("user", "ana"))  # event 5, recent
    retention = EventRetention(
        one.app.transitions, schedule_sql(one.store), retention_days=7, batch=2, clock=clock
    )
    assert await retention.run_once() == 4  # old 1..4; the quiet one's only event stays
    assert [e.sequence for e in await one.schedules.events("proj", "old", 0, 10)] == [5]
    assert [e.type for e in await one.schedules.events("proj", "quiet", 0, 10)] == ["created"]
    await one.schedules.resume("proj", "old", ("user", "ana"))
    assert [e.sequence for e in await one.schedules.events("proj", "old", 0, 10)] == [6, 5]
    assert len(await runs_of(one.store, "old")) == 3  # the runs stay


async def test_a_schedule_created_again_under_its_old_id_never_reuses_a_secret(
    replicas: Callable[[int], asyncio.Future[list[Replica]]], clock: Clock
) -> None:
    (one,) = await replicas(1)
    _, first = await one.schedules.create(every_second("again", webhook=True), ("user", "ana"))
    await one.schedules.delete("proj", "again", None)
    clock.now += 1
    _, second = await one.schedules.create(every_second("again", webhook=True), ("user", "ana"))
    assert second != first
    body = b"{}"
    with pytest.raises(WebhookSignatureInvalid):
        await one.schedules.deliver("proj", "again", "x", sign(first, clock.now, "x", body), body)
