"""Prometheus metrics with seed B §16's names. Labels are bounded vocabularies (statuses,
event types, command names): never a run id, task id or error message."""

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

log = logging.getLogger(__name__)


class _Refusals(Collector):
    def __init__(self, refused: Mapping[str, int]) -> None:
        self._refused = refused

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "runtime_message_refused",
            "Runtime messages refused as evidence of nothing (another owner's instance or "
            "task, an Inspect answer nobody asked for)",
            labels=["reason"],
        )
        for reason, count in sorted(self._refused.items()):
            family.add_metric([reason], count)
        yield family


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.transitions = Counter(
            "run_transition_total",
            "Committed run transitions",
            ["from", "to", "result"],
            registry=r,
        )
        self.conflicts = Counter(
            "run_transition_conflict_total", "Compare-and-set misses", ["command"], registry=r
        )
        self.events = Counter("run_event_append_total", "Events appended", ["type"], registry=r)
        self.reconciles = Counter(
            "run_reconcile_total", "Reconciler actions", ["executor", "result"], registry=r
        )
        self.late_callbacks = Counter(
            "attempt_late_callback_total",
            "Runtime evidence ignored as late, duplicate or out of order",
            ["executor", "type"],
            registry=r,
        )
        self.schedule_decisions = Counter(
            "schedule_decision_total",
            "What scheduler rounds decided, by kind: fired, skipped, buffered, unbuffered, "
            "coalesced, missed, cancel_requested, error",
            ["decision"],
            registry=r,
        )
        self.long_task_actions = Counter(
            "long_task_watcher_action_total",
            "What long-task watcher rounds did, by action (started, budget_exhausted, ended, "
            "settled_at_start, error) and label (ended: the run's status; error: the call)",
            ["action", "label"],
            registry=r,
        )
        self.long_task_outcomes = Counter(
            "long_task_outcome_total",
            "Long tasks that reached a terminal state, by state (completed, partial, failed, "
            "cancelled): task success is completed over all",
            ["state"],
            registry=r,
        )
        self.long_task_recoveries = Counter(
            "long_task_recovery_total",
            "Attempts that ended before their task settled, by how recovery went on: resumed "
            "(by itself), asked_person, recovery_required",
            ["outcome"],
            registry=r,
        )
        self.long_task_interventions = Counter(
            "long_task_human_intervention_total",
            "Decisions a person answered, by kind (question, effect, verification, approval)",
            ["kind"],
            registry=r,
        )
        self.long_task_notices = Counter(
            "long_task_notices_total",
            "Notices written to the outbox, by kind (interruption, decision, approval, terminal)",
            ["kind"],
            registry=r,
        )
        self.notice_deliveries = Counter(
            "long_task_notice_delivery_total",
            "Notice webhook posts, by outcome (delivered, retry, dead)",
            ["outcome"],
            registry=r,
        )
        self.long_task_approval_repeats = Counter(
            "long_task_approval_repeat_total",
            "Approval requests for an action the same task asked for before (repeat count > 1)",
            registry=r,
        )
        self.long_task_queue_wait = Histogram(
            "long_task_queue_wait_seconds",
            "How long a long task waited queued before its attempt started",
            buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, float("inf")),
            registry=r,
        )
        self.preflights = Counter(
            "run_preflight_total",
            "Activation preflights of ordinary runs decided by the runtime's classifier, by "
            "side-effect tier (idempotent, queryable, non_idempotent) and verdict (ordinary, "
            "promote)",
            ["tier", "verdict"],
            registry=r,
        )
        self.preflight_latency = Histogram(
            "run_preflight_seconds",
            "How long a preflight took, by tier: from PreflightToolCall answering "
            "'preflight needed' to the classifier's verdict recorded",
            ["tier"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, float("inf")),
            registry=r,
        )
        self.long_task_false_completions = Counter(
            "long_task_false_completion_total",
            "Completed long tasks later found not complete, by who found it: person (a "
            "person continued the completed task), verifier (on the continued plan the "
            "verifier failed a criterion the completion had passed)",
            ["found_by"],
            registry=r,
        )
        self.long_task_duplicate_effects = Counter(
            "long_task_duplicate_effect_total",
            "Side-effect receipts recorded for an intent (idempotency key, else the step) "
            "that already had one from another try, naming another external id",
            registry=r,
        )
        self.non_terminal_age = Gauge(
            "run_non_terminal_age_seconds",
            "Age of the oldest run in each non-terminal status",
            ["status"],
            registry=r,
        )

    def committed(self, result: Result) -> None:
        """A hub listener: one call per committed result in this process."""
        for event in result.events:
            self.events.labels(event.type).inc()
            if event.type == "attempt.late_callback_ignored":
                reported = str(event.payload.get("reported_type", "unknown"))
                self.late_callbacks.labels("runtime", reported).inc()
        if result.events and result.outcome != "ignored":
            to = result.run.status.value
            self.transitions.labels(result.from_status or "new", to, result.outcome).inc()

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
        kept by the runtime sessions) as ``runtime_message_refused_total``."""
        self.registry.register(_Refusals(refused))

    def conflict(self, command: str) -> None:
        self.conflicts.labels(command).inc()

    async def watch_ages_once(self, store: RunReader) -> None:
        oldest = await store.oldest_non_terminal()
        now = now_ms()
        self.non_terminal_age.clear()
        for status, since in oldest.items():
            self.non_terminal_age.labels(status).set(max(0, now - since) / 1000)

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
