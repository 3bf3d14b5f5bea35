"""The background work of a process: the periodic loops of the scans (retries, leases,
output retention) and the tasks it starts on the side (a dispatch per claimed attempt).

Nothing here dies silently (docs/operations.md "Metrics"): a round that fails is
logged, counted in ``FAILURES`` by the loop's name (exported as
``truerun_loop_failure_total{loop}``) and the next one comes anyway, so a database hiccup
or one unreadable row never stops a scan for good; a side task that fails is logged and
counted the same way when it ends (``supervise``), never left as "Task exception was never
retrieved"."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Failed rounds and side tasks of this process, by loop name (a bounded vocabulary: the
#: names given to ``every`` and ``supervise`` in code, never an id).
FAILURES: Counter[str] = Counter()


def failed(what: str) -> None:
    """Count one failure of the loop ``what`` (the caller has logged it)."""
    FAILURES[what] += 1


async def every(interval_s: float, round_: Callable[[], Awaitable[object]], what: str) -> None:
    """Run ``round_`` every ``interval_s`` seconds until cancelled; ``what`` names it in the
    log and the failure count when a round fails."""
    while True:
        try:
            await round_()
        except Exception:  # a database hiccup: next round, never die
            log.exception("%s failed", what)
            failed(what)
        await asyncio.sleep(interval_s)


def supervise(task: asyncio.Task[T], what: str, held: set[asyncio.Task[T]] | None = None) -> None:
    """When ``task`` ends with an exception (not a cancel): log it and count it under
    ``what``. Retrieving the exception here is what keeps asyncio from reporting it, much
    later and unattributed, as never retrieved. ``held``: a set that keeps the task (a
    reference, so it is not collected) until it ends."""
    if held is not None:
        held.add(task)
        task.add_done_callback(held.discard)

    def ended(done: asyncio.Task[T]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            log.error("%s failed", what, exc_info=error)
            failed(what)

    task.add_done_callback(ended)
