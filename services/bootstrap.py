"""The composition root: opens the store named by a database URL and wires the services."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from automations.service.retention import EventRetention
from automations.service.scheduler import Scheduler
from automations.service.schedules import Schedules
from automations.store.sql import ScheduleSql
from capacity.local import LocalClaims
from capacity.observations.base import ObservationStore
from capacity.observations.memory import MemoryObservationStore
from capacity.observations.redis_store import RedisObservationStore
from capacity.service.agents import AgentService
from capacity.service.claims import ClaimService
from capacity.service.reports import ObservationService
from capacity.store.base import CapacitySql
from capacity.store.postgres import PostgresCapacitySql
from capacity.store.sqlite import SqliteCapacitySql
from coordinator.dispatch.capacity_port import Claims, ObservationReporter
from coordinator.dispatch.dispatcher import Dispatcher
from coordinator.dispatch.ingest import EventIngest
from coordinator.dispatch.sessions import Sessions
from coordinator.dispatch.tokens import RuntimeTokens
from coordinator.domain.output import DEFAULT_OUTPUT_POLICY, OutputPolicy
from coordinator.service.group_commit import WRITERS
from coordinator.service.hub import EventHub
from coordinator.service.queries import RunQueries
from coordinator.service.transitions import Transitions
from coordinator.store.base import RunStore
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SqliteStore
from kernel.config import CLAIM_GATHER_MS, Settings
from kernel.ids import now_ms
from longtasks.service.door import LongTaskDoor
from longtasks.service.evidence_reader import EvidenceReader
from longtasks.service.evidence_sources import EvidenceSources
from longtasks.service.notice_delivery import NoticeDelivery
from longtasks.service.notices import NoticeDesk
from longtasks.service.retention import BrokenReferences, LongTaskRetention
from longtasks.service.upkeep import Upkeep
from longtasks.service.watcher import LongTaskWatcher
from longtasks.service.webhook_guard import WebhookGuard
from longtasks.store.sql import LongTaskSql
from longtasks.store.upkeep_sql import UpkeepSql
from longtasks.store.watcher_sql import WatcherSql
from services.metrics import Metrics


async def open_store(database_url: str) -> RunStore:
    if database_url.startswith("postgresql://"):
        return await PostgresStore.connect(database_url)
    if database_url.startswith("sqlite:///"):
        return await SqliteStore.open(database_url.removeprefix("sqlite:///"))
    raise ValueError(f"unsupported database URL {database_url!r} (postgresql:// or sqlite:///)")


@dataclass(frozen=True, slots=True)
class Coordinator:
    store: RunStore
    hub: EventHub
    transitions: Transitions
    queries: RunQueries
    #: This process's metrics (None in tests that count nothing): claims and ingest time.
    metrics: Metrics | None = None


def coordinator(
    store: RunStore,
    metrics: Metrics | None = None,
    clock: Callable[[], int] = now_ms,
    output: OutputPolicy = DEFAULT_OUTPUT_POLICY,
) -> Coordinator:
    """``clock``: UTC ms for every decision (tests pass a fake one)."""
    hub = EventHub()
    transitions = Transitions(
        store,
        clock=clock,
        on_commit=hub.publish,
        on_conflict=metrics.conflict if metrics else None,
        output=output,
        on_timed=metrics.transition_timed if metrics else None,
        # SQLite writes one transaction at a time: a second group would only wait for the
        # lock, and groups would be smaller (bench.lifecycle --store sqlite: 564 -> 515 runs/s)
        create_writers=1 if isinstance(store, SqliteStore) else WRITERS,
    )
    if metrics is not None:
        hub.listen(metrics.committed)
    return Coordinator(store, hub, transitions, RunQueries(store), metrics)


def output_policy(settings: Settings) -> OutputPolicy:
    return OutputPolicy(
        max_bytes=settings.output_max_bytes, note_interval_ms=settings.output_note_interval_ms
    )


@dataclass(frozen=True, slots=True)
class Runtimes:
    tokens: RuntimeTokens
    sessions: Sessions
    ingest: EventIngest
    dispatcher: Dispatcher
    #: Where heartbeats' capacity observations go: the capacity service, in or out of process.
    observations: ObservationReporter


def runtimes(
    app: Coordinator,
    caps: Capacity,
    tokens: RuntimeTokens,
    start_timeout_s: float = 10.0,
    cancel_grace_ms: int = 5_000,
    lease_ttl_ms: int = 30_000,
    max_recoveries: int = 5,
    claim_gather_ms: int = CLAIM_GATHER_MS,
) -> Runtimes:
    """The runtime side over the capacity service of this process (`truerun dev`)."""
    return remote_runtimes(
        app,
        LocalClaims(caps.claims),
        caps.reports,
        tokens,
        start_timeout_s=start_timeout_s,
        cancel_grace_ms=cancel_grace_ms,
        lease_ttl_ms=lease_ttl_ms,
        max_recoveries=max_recoveries,
        claim_gather_ms=claim_gather_ms,
    )


def remote_runtimes(
    app: Coordinator,
    claims: Claims,
    observations: ObservationReporter,
    tokens: RuntimeTokens,
    start_timeout_s: float = 10.0,
    cancel_grace_ms: int = 5_000,
    lease_ttl_ms: int = 30_000,
    max_recoveries: int = 5,
    claim_gather_ms: int = CLAIM_GATHER_MS,
) -> Runtimes:
    """The runtime side over any capacity port (`truerun coordinator`: the gRPC client)."""
    sessions = Sessions()
    ingest = EventIngest(
        app.transitions, on_timed=app.metrics.ingest_timed if app.metrics else None
    )
    dispatcher = Dispatcher(
        app.transitions,
        claims,
        ingest,
        sessions,
        start_timeout_s=start_timeout_s,
        cancel_grace_ms=cancel_grace_ms,
        lease_ttl_ms=lease_ttl_ms,
        max_recoveries=max_recoveries,
        claim_gather_ms=claim_gather_ms,
    )
    app.hub.listen(dispatcher.on_commit)
    return Runtimes(tokens, sessions, ingest, dispatcher, observations)


@dataclass(frozen=True, slots=True)
class Capacity:
    observations: ObservationStore
    claims: ClaimService
    reports: ObservationService
    agents: AgentService


def capacity_sql(store: RunStore) -> CapacitySql:
    if isinstance(store, PostgresStore):
        return PostgresCapacitySql(store.pool)
    if isinstance(store, SqliteStore):
        return SqliteCapacitySql(store)
    raise TypeError(f"no capacity queries for {type(store).__name__}")


async def open_observations(redis_url: str) -> ObservationStore:
    """Redis when a URL is given; the in-memory twin (same contract) for the embedded mode."""
    if redis_url:
        return await RedisObservationStore.connect(redis_url)
    return MemoryObservationStore()


def capacity(
    app: Coordinator,
    observations: ObservationStore,
    observation_ttl_ms: int,
    clock: Callable[[], int] = now_ms,
) -> Capacity:
    sql = capacity_sql(app.store)
    return Capacity(
        observations,
        ClaimService(
            sql,
            observations,
            app.transitions,
            clock=clock,
            on_timed=app.metrics.claim_timed if app.metrics else None,
        ),
        ObservationService(observations, sql, observation_ttl_ms, clock=clock),
        AgentService(sql),
    )


def schedule_sql(store: RunStore) -> ScheduleSql:
    if isinstance(store, PostgresStore):
        return ScheduleSql(postgres=True, read=store.pool.fetch)
    if isinstance(store, SqliteStore):
        return ScheduleSql(postgres=False, read=store.read)
    raise TypeError(f"no schedule queries for {type(store).__name__}")


def schedules(app: Coordinator, webhook_key: str, clock: Callable[[], int] = now_ms) -> Schedules:
    """The schedule commands (ScheduleService, WebhookService)."""
    return Schedules(app.transitions, schedule_sql(app.store), webhook_key.encode(), clock)


def scheduler(
    app: Coordinator,
    name: str,
    clock: Callable[[], int] = now_ms,
    metrics: Metrics | None = None,
) -> Scheduler:
    """The scheduler loop (any number of replicas; docs/automations.md)."""
    return Scheduler(
        app.transitions,
        schedule_sql(app.store),
        name=name,
        clock=clock,
        on_note=metrics.schedule_decision if metrics is not None else None,
    )


def longtask_sql(store: RunStore) -> LongTaskSql:
    if isinstance(store, PostgresStore):
        return LongTaskSql(postgres=True, read=store.pool.fetch)
    if isinstance(store, SqliteStore):
        return LongTaskSql(postgres=False, read=store.read)
    raise TypeError(f"no long-task queries for {type(store).__name__}")


def longtask_watcher_sql(store: RunStore) -> WatcherSql:
    if isinstance(store, PostgresStore):
        return WatcherSql(postgres=True, read=store.pool.fetch)
    if isinstance(store, SqliteStore):
        return WatcherSql(postgres=False, read=store.read)
    raise TypeError(f"no long-task queries for {type(store).__name__}")


def longtask_upkeep_sql(store: RunStore) -> UpkeepSql:
    if isinstance(store, PostgresStore):
        return UpkeepSql(postgres=True, read=store.pool.fetch)
    if isinstance(store, SqliteStore):
        return UpkeepSql(postgres=False, read=store.read)
    raise TypeError(f"no long-task queries for {type(store).__name__}")


def evidence_reader(app: Coordinator) -> EvidenceReader:
    """The attempts' evidence reader (docs/long-tasks.md "Reading evidence")."""
    sql = longtask_upkeep_sql(app.store)
    return EvidenceReader(Upkeep(app.transitions, sql), sql, EvidenceSources(sql, app.store))


def long_task_retention(
    app: Coordinator, retention_days: int, clock: Callable[[], int] = now_ms
) -> LongTaskRetention:
    """Retention by terminality (docs/long-tasks.md "Retention and export")."""
    sql = longtask_upkeep_sql(app.store)
    return LongTaskRetention(Upkeep(app.transitions, sql, clock), sql, retention_days, clock=clock)


def broken_references(app: Coordinator) -> BrokenReferences:
    """The start-up check of unfinished tasks' evidence references."""
    sql = longtask_upkeep_sql(app.store)
    return BrokenReferences(Upkeep(app.transitions, sql), sql, EvidenceSources(sql, app.store))


def long_tasks(
    app: Coordinator, clock: Callable[[], int] = now_ms, metrics: Metrics | None = None
) -> LongTaskDoor:
    """The long-task door (docs/long-tasks.md "Store and door"), over the run door; its
    committed changes counted in ``metrics`` (the release metrics)."""
    door = LongTaskDoor(app.transitions, longtask_sql(app.store), clock=clock)
    if metrics is not None:
        door.listen(metrics.long_task_committed)
        door.listen_preflights(metrics.preflight_decided)
        door.on_notice(metrics.long_task_notice)
    return door


def long_task_watcher(
    app: Coordinator,
    name: str,
    owner_concurrency: int,
    clock: Callable[[], int] = now_ms,
    metrics: Metrics | None = None,
) -> LongTaskWatcher:
    """The long-task watcher and scheduler loop (any number of replicas; docs/long-tasks.md
    "The watcher"), woken by this process's commits of long-task runs."""
    watcher = LongTaskWatcher(
        long_tasks(app, clock=clock, metrics=metrics),
        longtask_watcher_sql(app.store),
        name=name,
        owner_concurrency=owner_concurrency,
        on_action=metrics.long_task_action if metrics is not None else None,
    )
    app.hub.listen(watcher.wake)
    return watcher


def notice_desk(app: Coordinator, webhook_key: str, webhook_allow: str = "") -> NoticeDesk:
    """The owners' notices and webhook subscriptions (docs/long-tasks.md "Notices")."""
    key = webhook_key.encode() if webhook_key else None
    guard = WebhookGuard(webhook_allow)
    return NoticeDesk(app.transitions, longtask_sql(app.store), key, guard=guard)


def notice_delivery(
    app: Coordinator,
    webhook_key: str,
    max_tries: int,
    retry_base_ms: int,
    metrics: Metrics | None = None,
    webhook_allow: str = "",
) -> NoticeDelivery:
    """The loop posting notices to the owners' webhooks (any number of replicas), only to
    URLs ``webhook_allow`` allows (checked again before every post)."""
    return NoticeDelivery(
        app.transitions,
        longtask_sql(app.store),
        webhook_key.encode(),
        max_tries=max_tries,
        retry_base_ms=retry_base_ms,
        on_outcome=metrics.notice_delivery if metrics is not None else None,
        guard=WebhookGuard(webhook_allow),
    )


def schedule_event_retention(app: Coordinator, retention_days: int) -> EventRetention:
    return EventRetention(app.transitions, schedule_sql(app.store), retention_days)
