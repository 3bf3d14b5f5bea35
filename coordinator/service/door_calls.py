"""What each command through the door (transitions.py) leaves besides its write: a span (ids
only, never tokens), its run, attempt and project on every log record meanwhile
(kernel/logs.py), and its time, for the transition latency histogram."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from opentelemetry.trace import Span

from coordinator.service.door_tx import Result
from kernel import logs
from kernel.telemetry import span

log = logging.getLogger("coordinator.service.transitions")


@contextmanager
def through_door(
    command: str,
    on_timed: Callable[[str, float], None] | None,
    run_id: str = "",
    attempt_id: str = "",
    project: str = "",
) -> Iterator[Span]:
    """One command (a class name: a bounded label) through the door; ``on_timed(command,
    seconds)`` hears its time whether it committed, changed nothing or raised."""
    attributes = {"truerun.run_id": run_id} if run_id else {"truerun.project_id": project}
    if attempt_id:
        attributes["truerun.attempt_id"] = attempt_id
    began = time.perf_counter()
    try:
        with (
            logs.bound(run_id=run_id, attempt_id=attempt_id, project=project),
            span(f"transition {command}", attributes) as current,
        ):
            yield current
    finally:
        if on_timed is not None:
            on_timed(command, time.perf_counter() - began)


def describe(current: Span, result: Result) -> None:
    """The result on the span, its ids on the log context (a created run's id, the project
    only the loaded run knows), and one debug record of the transition."""
    current.set_attribute("truerun.run_id", result.run.id)
    current.set_attribute("truerun.outcome", result.outcome)
    current.set_attribute("truerun.run_status", result.run.status.value)
    logs.bind(run_id=result.run.id, project=result.run.project_id)
    if result.attempt is not None:
        logs.bind(attempt_id=result.attempt.id)
    log.debug(
        "transition %s -> %s: %s",
        result.from_status or "new",
        result.run.status.value,
        result.outcome,
    )
