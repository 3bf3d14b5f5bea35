"""A fake clock (UTC ms) that moves only when a test sets ``now``: the schedules' and the
long tasks' decisions read it, so a test can walk them through fire times and leases."""

from __future__ import annotations

#: A fixed instant: 2027-01-15 08:00:00 UTC.
START = 1_800_000_000_000


class Clock:
    def __init__(self, start_ms: int = START) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now
