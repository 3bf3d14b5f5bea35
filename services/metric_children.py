"""A labelled metric's children, looked up once per label values.

prometheus_client's ``labels()`` converts and validates every value and takes the metric's
lock on each call; the hot paths (every committed event, every RPC) ask for the same few
children thousands of times a second. Label values here are bounded sets (event types,
statuses, method names, status codes), so the map stays as small as the metric itself.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)


class Children(Generic[M]):
    def __init__(self, metric: M) -> None:
        self._metric = metric
        self._known: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        child = self._known.get(values)
        if child is None:
            child = self._known[values] = self._metric.labels(*values)
        return child
