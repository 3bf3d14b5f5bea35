"""The queue gauges per project (services/metrics.py set_queues): depth and oldest age from
one grouped reading, a drained project at depth 0 with no age, and the project label bounded
even when callers keep naming new projects."""

from __future__ import annotations

from services import metrics as m
from services.metrics import Metrics

NOW = 1_000_000


def _depth(metrics: Metrics, project: str) -> float | None:
    return metrics.registry.get_sample_value("truerun_run_queue_depth", {"project": project})


def _age(metrics: Metrics, project: str) -> float | None:
    name = "truerun_run_queue_oldest_age_seconds"
    return metrics.registry.get_sample_value(name, {"project": project})


def test_depth_and_age_per_project_and_a_drained_queue() -> None:
    metrics = Metrics()
    metrics.set_queues({"a": (3, NOW - 5_000), "b": (1, NOW - 250)}, NOW)
    assert (_depth(metrics, "a"), _age(metrics, "a")) == (3, 5.0)
    assert (_depth(metrics, "b"), _age(metrics, "b")) == (1, 0.25)
    metrics.set_queues({"b": (2, NOW - 1_000)}, NOW + 1_000)
    assert (_depth(metrics, "a"), _age(metrics, "a")) == (0, None)  # drained: no oldest run
    assert (_depth(metrics, "b"), _age(metrics, "b")) == (2, 2.0)


def test_past_the_cap_new_projects_share_one_series() -> None:
    metrics = Metrics()
    cap = m.MAX_PROJECT_LABELS
    queued = {f"p{i:04d}": (1, NOW - i) for i in range(cap + 5)}
    metrics.set_queues(queued, NOW)
    assert _depth(metrics, "p0000") == 1 and _depth(metrics, f"p{cap - 1:04d}") == 1
    assert _depth(metrics, f"p{cap:04d}") is None
    assert _depth(metrics, m.OTHER_PROJECTS) == 5
    assert _age(metrics, m.OTHER_PROJECTS) == (cap + 4) / 1000  # the oldest of the five
    series = [
        s
        for f in metrics.registry.collect()
        if f.name == "truerun_run_queue_depth"
        for s in f.samples
    ]
    assert len(series) == cap + 1
