"""The schedules' calendar: fire times of cron, interval and one-off specs. The pure
module lives on the ground floor (``kernel/calendar.py``) because the long tasks'
continuations use it too; this name stays for the schedules' code."""

from __future__ import annotations

from kernel.calendar import (
    MAX_JITTER_MS,
    MIN_INTERVAL_MS,
    Calendar,
    Cron,
    Interval,
    InvalidCalendar,
    Once,
    Timing,
    clock_text,
    fires_between,
    interval_text,
    jitter_for,
    next_fire,
    parse_interval,
    upcoming,
    validate,
)

__all__ = [
    "MAX_JITTER_MS",
    "MIN_INTERVAL_MS",
    "Calendar",
    "Cron",
    "Interval",
    "InvalidCalendar",
    "Once",
    "Timing",
    "clock_text",
    "fires_between",
    "interval_text",
    "jitter_for",
    "next_fire",
    "parse_interval",
    "upcoming",
    "validate",
]
