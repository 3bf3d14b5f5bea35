"""The garbage collector of a server process, set for a service's allocation pattern.

A run's path makes a few hundred short-lived container objects (records, protobuf messages,
futures) in bursts, and reference counting frees nearly all of them moments later. CPython's
default threshold collects the young generation after 700 allocations not yet freed, so
nearly every burst paid for a collection of objects about to die anyway, and every tenth of
those for a middle one, and now and then for a full one walking every object of the process.
The lifecycle bench's server, after its start-up (bench/README.md, #16 of 2026-12-06):
826 young, 75 middle and 4 full collections (56-88 ms each), 529 ms for ~8,000 runs, about
65 us a run. With the young threshold at ``YOUNG_THRESHOLD`` the same bench paid 25 ms
(4 young, 1 middle, no full collection): bursts are freed before a collection comes.
Cycles are still collected, in larger and rarer batches.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # CPython's default: 700
OLDER_THRESHOLD = 10  # CPython's default, for both older generations


def tune_for_service() -> None:
    """Raise the young generation's threshold (a server process, before it starts)."""
    gc.set_threshold(YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
