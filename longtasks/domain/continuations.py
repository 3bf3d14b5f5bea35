"""Continuations of a long task: when its next attempt may start, and what catching up after
truerun was not running makes of the times it missed (docs/long-tasks.md "Continuations and
catch-up"; seed C "离线与补跑窗口"). Pure: a continuation and the time -> what to do, in
words a person reads.

A continuation holds a ``queued`` task back from the scheduler until it is due; it is a
trigger, not state: it names the task's version when it was scheduled, and once the task
has moved on (a person paused, resumed or cancelled it, another continuation replaced it)
it holds nothing and firing it changes nothing but dropping it.

- ``at``: one instant ("continue tomorrow 09:00").
- ``window``: the next time a calendar window opens (a cron expression read in a zone, or an
  epoch-aligned interval); the windows truerun was not running for are its missed ones.

When it is due, every nominal time from its due time up to now is looked at: those inside
the catch-up window (the last ``catchup_window_ms`` before now) coalesce into one release of
the task (one attempt, never one per time: no side-effect step is replayed in a batch);
those older are missed and reported ("missed 3 continuations while truerun was not
running"). With none inside the window, a ``window`` continuation waits for its next window
and an ``at`` one for a person (nothing else would ever start it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kernel.calendar import (
    Calendar,
    Cron,
    Interval,
    InvalidCalendar,
    clock_text,
    fires_between,
    next_fire,
    validate,
)

#: The watcher looks at due continuations once a round, at most a second apart: a shorter
#: catch-up window could count a continuation fired a round late as missed.
MIN_CATCHUP_WINDOW_MS = 2_000
MAX_CATCHUP_WINDOW_MS = 7 * 86_400_000
DEFAULT_CATCHUP_WINDOW_MS = 15 * 60_000
#: Missed times are counted up to this many (a 1 s window down for a week is "10000+").
MISSED_COUNT_CAP = 10_000
#: How far ahead an ``at`` continuation may be (a typo of a year is refused).
MAX_AHEAD_MS = 366 * 86_400_000


class ContinuationKind(StrEnum):
    AT = "at"
    WINDOW = "window"


@dataclass(frozen=True, slots=True)
class Continuation:
    """The stored continuation of one task (at most one: a new one replaces it)."""

    task_id: str
    kind: ContinuationKind
    expected_version: int  # the task's state_version it holds; any other: stale
    due_ms: int | None  # the next nominal time; None: missed, waiting for a person
    time_zone: str = "UTC"
    cron: str | None = None  # window: a cron expression read in time_zone
    every_ms: int | None = None  # window: an epoch-aligned interval
    catchup_window_ms: int = DEFAULT_CATCHUP_WINDOW_MS
    missed_total: int = 0
    note: str = ""  # the last catch-up's words (missed, coalesced)
    reason: str = ""
    requested_by: str = ""
    created_at_ms: int = 0
    fired_at_ms: int | None = None  # released the task (kept to show its note)

    def calendar(self) -> Calendar | None:
        if self.kind is not ContinuationKind.WINDOW:
            return None
        if self.cron is not None:
            return Calendar(Cron(self.cron), self.time_zone)
        return Calendar(Interval(self.every_ms or 0), self.time_zone)

    def holds(self, state_version: int) -> bool:
        """Whether it keeps the task (at ``state_version``) from the scheduler now."""
        return self.fired_at_ms is None and self.expected_version == state_version


@dataclass(frozen=True, slots=True)
class Firing:
    """What a due continuation does now. ``release``: the task goes to the scheduler (one
    attempt); else it keeps waiting, for ``next_due_ms`` (None: for a person)."""

    release: bool
    next_due_ms: int | None
    missed: int
    coalesced: int
    text: str


def spec_refusal(c: Continuation, now_ms: int) -> str | None:
    """Why a continuation as asked cannot be used (None: it can); names the field."""
    if not MIN_CATCHUP_WINDOW_MS <= c.catchup_window_ms <= MAX_CATCHUP_WINDOW_MS:
        return (
            f"catchup_window must be between {MIN_CATCHUP_WINDOW_MS // 1000} s and "
            f"{MAX_CATCHUP_WINDOW_MS // 86_400_000} days"
        )
    calendar = c.calendar()
    if calendar is not None:
        if (c.cron is None) == (c.every_ms is None):
            return "window needs exactly one of cron and every"
        try:
            validate(calendar)
        except InvalidCalendar as bad:
            return f"window: {bad}"
        if next_fire(calendar, now_ms) is None:
            return "window never opens again"
        return None
    try:
        validate(Calendar(Interval(1000), c.time_zone))
    except InvalidCalendar as bad:
        return str(bad)
    if c.due_ms is None or c.due_ms > now_ms + MAX_AHEAD_MS:
        return "at must be set, and at most a year ahead"
    return None


def first_due(c: Continuation, now_ms: int) -> int | None:
    """The due time of a new continuation: ``at`` as given (a past one is due at once);
    a window's next opening after now."""
    calendar = c.calendar()
    return c.due_ms if calendar is None else next_fire(calendar, now_ms)


def plan_firing(c: Continuation, now_ms: int) -> Firing | None:
    """The catch-up decision for a continuation at ``now_ms`` (None: not due yet)."""
    if c.due_ms is None or c.due_ms > now_ms:
        return None
    calendar = c.calendar()
    times = [c.due_ms]
    if calendar is not None:
        times += fires_between(calendar, c.due_ms, now_ms, MISSED_COUNT_CAP - 1)
    start = now_ms - c.catchup_window_ms
    missed = [t for t in times if t < start]
    inside = [t for t in times if t >= start]
    parts = []
    if missed:
        capped = len(times) >= MISSED_COUNT_CAP
        parts.append(missed_text(c, len(missed), capped, missed[0], missed[-1]))
    if inside:
        coalesced = len(inside) - 1
        said = f"continuation due {clock_text(inside[-1], c.time_zone)} released the task"
        if coalesced:
            late = "s" if coalesced > 1 else ""
            said += f" (coalesced {coalesced} more late continuation{late} into this one attempt)"
        return Firing(True, None, len(missed), coalesced, "; ".join([said, *parts]))
    following = next_fire(calendar, now_ms) if calendar is not None else None
    return Firing(False, following, len(missed), 0, "; ".join([*parts, waiting_text(c, following)]))


def missed_text(c: Continuation, count: int, capped: bool, first: int, last: int) -> str:
    zone = c.time_zone
    span = (
        clock_text(first, zone)
        if count == 1
        else f"{clock_text(first, zone)}..{clock_text(last, zone)}"
    )
    plural = "s" if count != 1 else ""
    return (
        f"missed {count}{'+' if capped else ''} continuation{plural} while truerun was not "
        f"running ({span}, outside the {_duration(c.catchup_window_ms)} catch-up window)"
    )


def waiting_text(c: Continuation, due_ms: int | None) -> str:
    """What a task held by its continuation says: stillness explained (seed C, "E. 显式表达
    '在等, 不是卡死'": the next time, and that truerun must keep running)."""
    if due_ms is None:
        return "waiting for you to continue it: its continuation was missed, no next window"
    what = "its next window" if c.kind is ContinuationKind.WINDOW else "its continuation"
    return f"waiting for {what} at {clock_text(due_ms, c.time_zone)} (truerun must be running)"


def _duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms / 1000:g}s"
