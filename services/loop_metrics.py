"""truerun_loop_failure_total: the failed rounds and side tasks kernel/loops.py counts, by
loop name (docs/operations.md "Metrics"), read at each scrape."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from kernel import loops


class LoopFailures(Collector):
    """kernel/loops.FAILURES as a counter family."""

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "truerun_loop_failure",
            "Background loop rounds and side tasks that failed (logged; the loop goes on)",
            labels=["loop"],
        )
        for loop, count in sorted(loops.FAILURES.items()):
            family.add_metric([loop], count)
        yield family
