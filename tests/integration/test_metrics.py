"""Seed B §16 metrics: the names, counted from what commits, and no ids in labels."""

from __future__ import annotations

import re
import urllib.request

import pytest

from coordinator.domain import commands as c
from kernel.errors import VersionConflict
from services.bootstrap import coordinator, open_store
from services.metrics import Metrics
from tests.support.factories import SCHEDULER, USER, evidence, spec, started

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-")


async def test_metrics_count_what_commits_without_ids(migrated_database_url: str) -> None:
    metrics = Metrics()
    store = await open_store(migrated_database_url)
    try:
        app = coordinator(store, metrics)
        created = await app.transitions.create(spec())
        await app.transitions.execute(c.RequestCancel(created.run.id, USER))
        with pytest.raises(VersionConflict):
            await app.transitions.execute(c.Approve(created.run.id, USER, expected_version=1))
        _, attempt = await started(app.transitions)
        await app.transitions.execute(evidence(c.RuntimeRunning, attempt, 1))
        await app.transitions.execute(evidence(c.RuntimeRunning, attempt, 1))  # duplicate
        await metrics.watch_ages_once(store)
    finally:
        await store.close()

    def value(name: str, **labels: str) -> float:
        found = metrics.registry.get_sample_value(name, labels)
        return found or 0.0

    assert (
        value(
            "truerun_run_transition_total", **{"from": "new", "to": "queued", "result": "applied"}
        )
        == 2
    )
    assert (
        value(
            "truerun_run_transition_total",
            **{"from": "queued", "to": "cancelled", "result": "applied"},
        )
        == 1
    )
    assert (
        value("truerun_run_transition_conflict_total", command="Approve") == 0
    )  # pinned: no retry
    assert value("truerun_run_event_append_total", type="run.created") == 2
    assert (
        value("truerun_attempt_late_callback_total", executor="runtime", type="RuntimeRunning") == 1
    )
    assert value("truerun_run_non_terminal_age_seconds", status="running") >= 0
    exposition = metrics.exposition()
    for name in (
        "truerun_run_transition_total",
        "truerun_run_event_append_total",
        "truerun_attempt_late_callback_total",
        "truerun_run_non_terminal_age_seconds",
    ):
        assert name in exposition
    assert not UUID.search(exposition), "a run or attempt id leaked into a label"
    assert SCHEDULER.id not in exposition


def test_metrics_endpoint_serves_prometheus_text() -> None:
    metrics = Metrics()
    metrics.events.labels("run.created").inc()
    server, port = metrics.serve("127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'truerun_run_event_append_total{type="run.created"} 1.0' in body
