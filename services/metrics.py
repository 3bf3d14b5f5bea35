"""Prometheus metrics: seed B §16's families, every name prefixed ``truerun_`` (counters end
in ``_total``, durations in ``_seconds``). Labels are bounded vocabularies (statuses, event
types, command names, gRPC method names, and ``project``, a tenant name bounded by
configuration): never a run, attempt or task id, an instance or an error message, each of which
would make a new time series per value and grow without end.

Each process exports only the families of the work it does (``parts``; docs/operations.md
"Metrics"): a family registered in a process that never counts it would read as a zero that
means nothing. The metric objects of the other parts still exist (their callers need not ask),
registered nowhere."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from automations.domain.model import Note
from coordinator.service.transitions import Result
from coordinator.store.base import RunReader
from kernel.ids import now_ms
from kernel.tls import ServerTls
from longtasks.service import observed
from longtasks.service.observed import Committed
from services.loop_metrics import LoopFailures
from services.metric_children import Children
from services.rpc_metrics import RpcMetrics

log = logging.getLogger(__name__)

# No ``*_created`` series beside every counter and histogram: a second series per label set
# that no dashboard of ours reads (process-wide, which is what every truerun process wants).
disable_created_metrics()  # type: ignore[no-untyped-call]

#: The door's own families: what commits, conflicts and events appended, and how long a
#: transition takes; every process that runs the door (claims, ingest, scans) exports them.
DOOR = "door"
#: Runtime evidence: late callbacks, refused messages, event ingest latency (coordinator).
RUNTIME = "runtime"
#: Gauges read from the store on an interval: non-terminal ages, queue depth per project.
STORE_GAUGES = "store_gauges"
RECONCILER = "reconciler"
SCHEDULES = "schedules"
#: The long-task door's release metrics (wherever a door commits them).
LONG_TASKS = "long_tasks"
#: The long-task watcher's rounds and the notice delivery loop (the reconciler's).
WATCHER = "watcher"
#: Claims (the capacity service).
CAPACITY = "capacity"
#: Every gRPC call a server handled (services/rpc_metrics.py).
RPC = "rpc"
#: The gateway's HTTP requests (gateway/metrics.py, on the same registry in `truerun dev`).
GATEWAY = "gateway"
ALL_PARTS = frozenset(
    {DOOR, RUNTIME, STORE_GAUGES, RECONCILER, SCHEDULES, LONG_TASKS, WATCHER, CAPACITY, RPC}
    | {GATEWAY}
)
#: What each process exports (services/cli/*.py); `truerun dev` runs them all.
COORDINATOR_PARTS = frozenset({DOOR, RUNTIME, STORE_GAUGES, LONG_TASKS, RPC})
CAPACITY_PARTS = frozenset({DOOR, CAPACITY, RPC})
RECONCILER_PARTS = frozenset({DOOR, STORE_GAUGES, RECONCILER, SCHEDULES, LONG_TASKS, WATCHER, RPC})
GATEWAY_PARTS = frozenset({GATEWAY})

#: Latency buckets of the door, claims and ingest: a commit is milliseconds, a slow one
#: (lock waits, a busy database) seconds.
#: How many projects get their own queue series; the rest share ``_other``.
MAX_PROJECT_LABELS = 200
OTHER_PROJECTS = "_other"
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Refusals(Collector):
    def __init__(self, refused: Mapping[str, int]) -> None:
        self._refused = refused

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "truerun_runtime_message_refused",
            "Runtime messages refused as evidence of nothing (another owner's instance or "
            "task, an Inspect answer nobody asked for)",
            labels=["reason"],
        )
        for reason, count in sorted(self._refused.items()):
            family.add_metric([reason], count)
        yield family


class Metrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, parts: Iterable[str] = ALL_PARTS
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.parts = frozenset(parts)
        self.registry.register(LoopFailures())  # every process has background loops
        self.transitions = Counter(
            "truerun_run_transition_total",
            "Committed run transitions",
            ["from", "to", "result"],
            registry=self._to(DOOR),
        )
        self._transition_children = Children(self.transitions)
        self.conflicts = Counter(
            "truerun_run_transition_conflict_total",
            "Compare-and-set misses",
            ["command"],
            registry=self._to(DOOR),
        )
        self.events = Counter(
            "truerun_run_event_append_total", "Events appended", ["type"], registry=self._to(DOOR)
        )
        self._event_children = Children(self.events)
        self.reconciles = Counter(
            "truerun_run_reconcile_total",
            "Reconciler actions",
            ["executor", "result"],
            registry=self._to(RECONCILER),
        )
        self.late_callbacks = Counter(
            "truerun_attempt_late_callback_total",
            "Runtime evidence ignored as late, duplicate or out of order",
            ["executor", "type"],
            registry=self._to(RUNTIME),
        )
        self.schedule_decisions = Counter(
            "truerun_schedule_decision_total",
            "What scheduler rounds decided, by kind: fired, skipped, buffered, unbuffered, "
            "coalesced, missed, cancel_requested, error",
            ["decision"],
            registry=self._to(SCHEDULES),
        )
        self.long_task_actions = Counter(
            "truerun_long_task_watcher_action_total",
            "What long-task watcher rounds did, by action (started, budget_exhausted, ended, "
            "settled_at_start, error) and label (ended: the run's status; error: the call)",
            ["action", "label"],
            registry=self._to(WATCHER),
        )
        self.long_task_outcomes = Counter(
            "truerun_long_task_outcome_total",
            "Long tasks that reached a terminal state, by state (completed, partial, failed, "
            "cancelled): task success is completed over all",
            ["state"],
            registry=self._to(LONG_TASKS),
        )
        self.long_task_recoveries = Counter(
            "truerun_long_task_recovery_total",
            "Attempts that ended before their task settled, by how recovery went on: resumed "
            "(by itself), asked_person, recovery_required",
            ["outcome"],
            registry=self._to(LONG_TASKS),
        )
        self.long_task_interventions = Counter(
            "truerun_long_task_human_intervention_total",
            "Decisions a person answered, by kind (question, effect, verification, approval)",
            ["kind"],
            registry=self._to(LONG_TASKS),
        )
        self.long_task_notices = Counter(
            "truerun_long_task_notices_total",
            "Notices written to the outbox, by kind (interruption, decision, approval, terminal)",
            ["kind"],
            registry=self._to(LONG_TASKS),
        )
        self.notice_deliveries = Counter(
            "truerun_long_task_notice_delivery_total",
            "Notice webhook posts, by outcome (delivered, retry, dead)",
            ["outcome"],
            registry=self._to(WATCHER),
        )
        self.long_task_approval_repeats = Counter(
            "truerun_long_task_approval_repeat_total",
            "Approval requests for an action the same task asked for before (repeat count > 1)",
            registry=self._to(LONG_TASKS),
        )
        self.long_task_queue_wait = Histogram(
            "truerun_long_task_queue_wait_seconds",
            "How long a long task waited queued before its attempt started",
            buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, float("inf")),
            registry=self._to(LONG_TASKS),
        )
        self.preflights = Counter(
            "truerun_run_preflight_total",
            "Activation preflights of ordinary runs decided by the runtime's classifier, by "
            "side-effect tier (idempotent, queryable, non_idempotent) and verdict (ordinary, "
            "promote)",
            ["tier", "verdict"],
            registry=self._to(LONG_TASKS),
        )
        self.preflight_latency = Histogram(
            "truerun_run_preflight_seconds",
            "How long a preflight took, by tier: from PreflightToolCall answering "
            "'preflight needed' to the classifier's verdict recorded",
            ["tier"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, float("inf")),
            registry=self._to(LONG_TASKS),
        )
        self.long_task_false_completions = Counter(
            "truerun_long_task_false_completion_total",
            "Completed long tasks later found not complete, by who found it: person (a "
            "person continued the completed task), verifier (on the continued plan the "
            "verifier failed a criterion the completion had passed)",
            ["found_by"],
            registry=self._to(LONG_TASKS),
        )
        self.long_task_duplicate_effects = Counter(
            "truerun_long_task_duplicate_effect_total",
            "Side-effect receipts recorded for an intent (idempotency key, else the step) "
            "that already had one from another try, naming another external id",
            registry=self._to(LONG_TASKS),
        )
        self.non_terminal_age = Gauge(
            "truerun_run_non_terminal_age_seconds",
            "Age of the oldest run in each non-terminal status",
            ["status"],
            registry=self._to(STORE_GAUGES),
        )
        self.queue_depth = Gauge(
            "truerun_run_queue_depth",
            "Runs queued, per project (0 once a project's queue drained)",
            ["project"],
            registry=self._to(STORE_GAUGES),
        )
        self.queue_oldest_age = Gauge(
            "truerun_run_queue_oldest_age_seconds",
            "How long the oldest queued run of each project has waited (absent: none queued)",
            ["project"],
            registry=self._to(STORE_GAUGES),
        )
        self._projects_seen: set[str] = set()
        self.transition_latency = Histogram(
            "truerun_run_transition_seconds",
            "How long one command through the door took (read, decide, compare-and-set and "
            "append, retries included), by command",
            ["command"],
            buckets=FAST_BUCKETS,
            registry=self._to(DOOR),
        )
        self._transition_latency = Children(self.transition_latency)
        self.ingest_latency = Histogram(
            "truerun_runtime_event_ingest_seconds",
            "How long one batch of runtime events took to apply (one transaction, or event by "
            "event after a conflict)",
            buckets=FAST_BUCKETS,
            registry=self._to(RUNTIME),
        )
        self.claim_latency = Histogram(
            "truerun_claim_seconds",
            "How long a Claim took, by result: claimed, or why nothing was (no fresh "
            "observation, nothing eligible, ...)",
            ["result"],
            buckets=FAST_BUCKETS,
            registry=self._to(CAPACITY),
        )

        self.rpc = RpcMetrics(self._to(RPC))

    def _to(self, part: str) -> CollectorRegistry | None:
        """Where a family of ``part`` registers: this process's registry, or nowhere."""
        return self.registry if part in self.parts else None

    def transition_timed(self, command: str, seconds: float) -> None:
        """The door's timing listener: one command's time through it."""
        self._transition_latency(command).observe(seconds)

    def ingest_timed(self, seconds: float) -> None:
        self.ingest_latency.observe(seconds)

    def claim_timed(self, result: str, seconds: float) -> None:
        self.claim_latency.labels(result).observe(seconds)

    def committed(self, result: Result) -> None:
        """A hub listener: one call per committed result in this process."""
        for event in result.events:
            self._event_children(event.type).inc()
            if event.type == "attempt.late_callback_ignored":
                reported = str(event.payload.get("reported_type", "unknown"))
                self.late_callbacks.labels("runtime", reported).inc()
        if result.events and result.outcome != "ignored":
            to = result.run.status.value
            self._transition_children(result.from_status or "new", to, result.outcome).inc()

    def schedule_decision(self, note: Note) -> None:
        self.schedule_decisions.labels(note.type).inc()

    def long_task_action(self, action: str, label: str) -> None:
        self.long_task_actions.labels(action, label).inc()

    def long_task_notice(self, kind: str) -> None:
        self.long_task_notices.labels(kind).inc()

    def notice_delivery(self, outcome: str) -> None:
        self.notice_deliveries.labels(outcome).inc()

    def long_task_committed(self, c: Committed) -> None:
        """A long-task door listener: the release metrics of one committed change."""
        state = observed.terminal_outcome(c)
        if state is not None:
            self.long_task_outcomes.labels(state).inc()
        recovery = observed.recovery_outcome(c)
        if recovery is not None:
            self.long_task_recoveries.labels(recovery).inc()
        kind = observed.answered_kind(c)
        if kind is not None:
            self.long_task_interventions.labels(kind).inc()
        if observed.repeated_approval(c):
            self.long_task_approval_repeats.inc()
        waited = observed.queue_wait_ms(c)
        if waited is not None:
            self.long_task_queue_wait.observe(waited / 1000)
        found_by = observed.false_completion(c)
        if found_by is not None:
            self.long_task_false_completions.labels(found_by).inc()
        duplicates = observed.duplicate_effects(c)
        if duplicates:
            self.long_task_duplicate_effects.inc(duplicates)

    def preflight_decided(self, tier: str, verdict: str, seconds: float) -> None:
        """A long-task door's preflight listener: one decided preflight."""
        self.preflights.labels(tier, verdict).inc()
        self.preflight_latency.labels(tier).observe(seconds)

    def count_refusals(self, refused: Mapping[str, int]) -> None:
        """Expose ``refused`` (runtime messages refused as evidence of nothing, by reason;
        kept by the runtime sessions) as ``truerun_runtime_message_refused_total``."""
        if RUNTIME in self.parts:
            self.registry.register(_Refusals(refused))

    def conflict(self, command: str) -> None:
        self.conflicts.labels(command).inc()

    async def watch_ages_once(self, store: RunReader) -> None:
        oldest = await store.oldest_non_terminal()
        now = now_ms()
        self.non_terminal_age.clear()
        for status, since in oldest.items():
            self.non_terminal_age.labels(status).set(max(0, now - since) / 1000)
        self.set_queues(await store.queued_by_project(), now)

    def set_queues(self, queued: Mapping[str, tuple[int, int]], now: int) -> None:
        """Queue depth and the oldest queued run's wait per project, from ``queued``
        (project -> (count, oldest queued_at ms)). A project that drained keeps depth 0 and
        loses its age (there is no oldest run to be old). Past MAX_PROJECT_LABELS projects
        the rest are summed under ``_other``: a label's values must stay bounded even when a
        `*` token lets callers name new projects."""
        depth: dict[str, int] = dict.fromkeys(self._projects_seen, 0)
        oldest: dict[str, int] = {}
        for project, (count, since) in sorted(queued.items()):
            label = project
            if project not in self._projects_seen:
                if len(self._projects_seen) >= MAX_PROJECT_LABELS:
                    label = OTHER_PROJECTS
                self._projects_seen.add(label)
            depth[label] = depth.get(label, 0) + count
            oldest[label] = min(oldest.get(label, since), since)
        self.queue_oldest_age.clear()
        for label, count in depth.items():
            self.queue_depth.labels(label).set(count)
        for label, since in oldest.items():
            self.queue_oldest_age.labels(label).set(max(0, now - since) / 1000)

    async def watch_ages(self, store: RunReader, interval_s: float = 15.0) -> None:
        while True:
            try:
                await self.watch_ages_once(store)
            except Exception:  # metrics never stop the service
                log.exception("non-terminal age scan failed")
            await asyncio.sleep(interval_s)

    def exposition(self) -> str:
        return generate_latest(self.registry).decode()

    def serve(self, address: str, tls: ServerTls | None = None) -> tuple[Any, int]:
        """An HTTP /metrics endpoint on ``host:port`` (port 0: a free one); HTTPS only with
        ``tls`` (never mTLS: scrapers verify the server, tokens are not involved)."""
        host, _, port = address.rpartition(":")
        server, _thread = start_http_server(
            int(port),
            addr=host,
            registry=self.registry,
            certfile=tls.cert_file if tls else None,
            keyfile=tls.key_file if tls else None,
        )
        return server, int(server.server_port)
