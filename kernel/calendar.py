"""When a schedule fires: nominal fire times of cron, interval and one-off specs (pure).

Shared by the schedules (``automations/``, which re-exports it as
``automations.domain.calendar``) and the long tasks' continuations
(``longtasks/domain/continuations.py``): both sit on one floor and may not import each
other, so the calendar lives on the ground floor.

Every time is an integer of UTC epoch milliseconds. Nothing here reads the clock: callers pass
``after_ms``. The only outside data is the IANA time zone database, read through ``zoneinfo``
(which caches each zone after its first load). Cron times must lie within datetime's years
1 to 9999; past them cronsim's search ends (no fire) or datetime raises OverflowError.

Cron is matched on the local wall-clock time of ``time_zone``. cronsim only ever sees naive
datetimes, so none of its own DST handling applies (it has Debian cron's quirks for aware
datetimes, and only for some 5-field specs); each matching wall time is then mapped to an
instant by the rules in docs/automations.md ("Time zones and DST"):

1. a wall time in a spring-forward gap uses the offset in force before the gap (fold=0);
2. a wall time that occurs twice fires once, at its first occurrence (fold=0);
3. an instant not strictly after the previous fire (or after ``after_ms``) is dropped;
4. when ``after_ms`` is inside a repeated hour, iteration starts from its wall time and the
   earlier occurrences it maps to are dropped by rule 3;
5. intervals and one-off times are instants and ignore DST.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

MAX_JITTER_MS = 3_600_000
#: Second-level schedules, and sub-second ones down to this floor (the fault test runs a
#: schedule at 100 ms to stand in for five minutes of a 1 s schedule).
MIN_INTERVAL_MS = 100

_EPOCH = datetime(1970, 1, 1)  # naive UTC: instants are computed as naive UTC minus epoch
_MS = timedelta(milliseconds=1)
_HOUR = timedelta(hours=1)
# Spring-forward gaps in tzdata are at most a day (Pacific/Apia skipped 2011-12-30), so the
# offset before any gap that can still matter is one that was in force within the last 25 h.
_GAP_LOOKBACK_HOURS = 25
# UTC offsets stay within ±24 h (datetime refuses more), so the wall times mapping to repeats
# of one instant span under two days: fewer than 172,800 one-second matches. A longer run of
# drops cannot come from any zone; it ends the search instead of spinning.
_MAX_CONSECUTIVE_DROPS = 200_000
_UNITS_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
# ASCII digits only (\d would take other scripts' digits), 12 at most per unit: no huge ints.
_INTERVAL_RE = re.compile(
    r"(?:([0-9]{1,12})d)?(?:([0-9]{1,12})h)?(?:([0-9]{1,12})m(?!s))?"
    r"(?:([0-9]{1,12})s)?(?:([0-9]{1,12})ms)?"
)


class InvalidCalendar(ValueError):
    """A schedule spec that cannot be used; the message names the field at fault."""


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression: 5 fields, or 6 with seconds first (cronsim syntax)."""

    expression: str


@dataclass(frozen=True, slots=True)
class Interval:
    """Fires at every instant ``k * every_ms + offset_ms`` (epoch-aligned, real time)."""

    every_ms: int
    offset_ms: int = 0


@dataclass(frozen=True, slots=True)
class Once:
    """Fires once, at ``at_ms``."""

    at_ms: int


Timing = Cron | Interval | Once


@dataclass(frozen=True, slots=True)
class Calendar:
    """A timing, the zone its cron fields are read in, inclusive bounds and a jitter."""

    timing: Timing
    time_zone: str = "UTC"
    start_ms: int | None = None
    end_ms: int | None = None
    jitter_ms: int = 0


def validate(calendar: Calendar) -> Calendar:
    """Return ``calendar`` unchanged, or raise InvalidCalendar naming the first bad field.

    A Once outside [start_ms, end_ms] is valid: it simply never fires."""
    _zone(calendar.time_zone)
    period_ms = _validate_timing(calendar.timing)
    _require_int_or_none("start_ms", calendar.start_ms)
    _require_int_or_none("end_ms", calendar.end_ms)
    start, end = calendar.start_ms, calendar.end_ms
    if start is not None and end is not None and end < start:
        raise InvalidCalendar(f"end_ms: {end} is before start_ms {start}")
    _validate_jitter(calendar.jitter_ms, period_ms)
    return calendar


def next_fire(calendar: Calendar, after_ms: int) -> int | None:
    """The first nominal fire strictly after ``after_ms`` inside [start_ms, end_ms].

    None means there is none: a Once already passed or out of bounds, end_ms reached, or a
    cron with no match within cronsim's 50-year horizon (or, defensively, one whose matches
    all map to repeats of instants already passed for longer than real zone data allows)."""
    return next(_fires(validate(calendar), after_ms), None)


def fires_between(calendar: Calendar, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """Nominal fires in (after_ms, until_ms], ascending, at most ``limit`` of them."""
    _require_count("limit", limit)
    fires = _fires(validate(calendar), after_ms)
    return list(islice(takewhile(lambda fire: fire <= until_ms, fires), limit))


def upcoming(calendar: Calendar, after_ms: int, count: int) -> list[int]:
    """The next ``count`` nominal fires after ``after_ms`` (fewer when the schedule ends)."""
    _require_count("count", count)
    return list(islice(_fires(validate(calendar), after_ms), count))


def jitter_for(key: str, fire_ms: int, jitter_ms: int) -> int:
    """A deterministic delay in [0, jitter_ms) for one fire of one schedule (0 if no jitter).

    The run is due at ``fire_ms + jitter``; ``fire_ms`` itself stays the nominal fire time
    and the idempotency key, so every replica computes the same due time without storing it.
    """
    if jitter_ms < 0 or jitter_ms > MAX_JITTER_MS:
        raise InvalidCalendar(f"jitter_ms: must be in [0, {MAX_JITTER_MS}], got {jitter_ms}")
    if jitter_ms == 0:
        return 0
    # The NUL separates key from time unambiguously: the part after the last NUL is digits.
    digest = hashlib.sha256(f"{key}\0{fire_ms}".encode()).digest()
    # 64 bits against at most 3.6e6 buckets: the modulo bias is below 1e-12.
    return int.from_bytes(digest[:8], "big") % jitter_ms


def interval_text(ms: int) -> str:
    """A short display form, largest unit first: 5_400_000 -> "1h30m", 1_500 -> "1s500ms"."""
    if ms < 0:
        return "-" + interval_text(-ms)
    parts = []
    for unit, size in _UNITS_MS.items():
        amount, ms = divmod(ms, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def parse_interval(text: str) -> int:
    """Milliseconds from "90s", "15m", "1h30m", "2d", "1s500ms", or plain seconds ("90").

    Units go largest first, each at most once; the total must be at least MIN_INTERVAL_MS."""
    stripped = text.strip()
    if stripped.isascii() and stripped.isdigit() and len(stripped) <= 12:
        total = int(stripped) * _UNITS_MS["s"]
    else:
        match = _INTERVAL_RE.fullmatch(stripped)
        if not stripped or match is None:
            raise InvalidCalendar(
                f"interval: {text!r} is not a duration like 90s, 15m, 1h30m or 2d"
            )
        amounts = (int(group or 0) for group in match.groups())
        total = sum(amount * size for amount, size in zip(amounts, _UNITS_MS.values(), strict=True))
    if total < MIN_INTERVAL_MS:
        raise InvalidCalendar(f"interval: {text!r} is shorter than {MIN_INTERVAL_MS} ms")
    return total


# --- validation -------------------------------------------------------------------------


def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidCalendar(f"time_zone: must be an IANA zone name, got {name!r}")
    if name == "localtime":
        # A file some systems provide: it would make fire times depend on the host.
        raise InvalidCalendar("time_zone: 'localtime' is the host's zone; name an IANA zone")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidCalendar(f"time_zone: unknown IANA time zone {name!r}") from None


def _validate_timing(timing: Timing) -> int | None:
    """Check the timing; return its smallest nominal spacing in ms, None when it has none."""
    if isinstance(timing, Cron):
        return _cron_period_ms(_cronsim(timing.expression, _EPOCH))
    if isinstance(timing, Interval):
        _require_int("timing.every_ms", timing.every_ms)
        _require_int("timing.offset_ms", timing.offset_ms)
        if timing.every_ms < MIN_INTERVAL_MS:
            raise InvalidCalendar(
                f"timing.every_ms: must be at least {MIN_INTERVAL_MS} (a tenth of a second), "
                f"got {timing.every_ms}"
            )
        if not 0 <= timing.offset_ms < timing.every_ms:
            raise InvalidCalendar(
                f"timing.offset_ms: must be in [0, every_ms={timing.every_ms}), "
                f"got {timing.offset_ms}"
            )
        return timing.every_ms
    if isinstance(timing, Once):
        _require_int("timing.at_ms", timing.at_ms)
        return None
    raise InvalidCalendar(f"timing: must be Cron, Interval or Once, got {type(timing).__name__}")


def _cronsim(expression: str, start: datetime) -> CronSim:
    if not isinstance(expression, str):
        raise InvalidCalendar(f"timing.expression: must be text, got {expression!r}")
    fields = len(expression.split())
    if fields not in (5, 6):
        raise InvalidCalendar(
            f"timing.expression: {expression[:80]!r} has {fields} fields; cron takes 5 "
            "(minute hour day-of-month month day-of-week) or 6 with seconds first"
        )
    try:
        return CronSim(expression, start)
    except CronSimError as exc:
        raise InvalidCalendar(f"timing.expression: {expression[:80]!r}: {exc}") from None


def _cron_period_ms(sim: CronSim) -> int:
    """The smallest spacing of the time-of-day fields, in wall-clock ms.

    Day, month and weekday fields are ignored, so the wrap from one day's last time to the
    next day's first counts even when the next day does not match: a lower bound, which keeps
    jitter below the real spacing without scanning the calendar."""
    seconds, minutes, hours = sorted(sim.seconds), sorted(sim.minutes), sorted(sim.hours)
    span_s = seconds[-1] - seconds[0]
    span_m = (minutes[-1] - minutes[0]) * 60 + span_s
    steps = [_smallest_step(seconds), _smallest_step(minutes) * 60 - span_s]
    steps.append(_smallest_step([*hours, hours[0] + 24]) * 3600 - span_m)
    return min(steps) * 1000


def _smallest_step(values: list[int]) -> int:
    # One value has no inner step; 10**6 s exceeds the hour step (with its wrap, <= 86,400 s)
    # that every caller's min() also holds.
    return min((b - a for a, b in pairwise(values)), default=10**6)


def _validate_jitter(jitter_ms: int, period_ms: int | None) -> None:
    _require_int("jitter_ms", jitter_ms)
    if not 0 <= jitter_ms <= MAX_JITTER_MS:
        raise InvalidCalendar(f"jitter_ms: must be in [0, {MAX_JITTER_MS}], got {jitter_ms}")
    if period_ms is not None and jitter_ms >= period_ms:
        # A jitter as long as the period would let a run fall due after the next fire's.
        raise InvalidCalendar(
            f"jitter_ms: must be less than the schedule's smallest period ({period_ms} ms), "
            f"got {jitter_ms}"
        )


def _require_int(field: str, value: object) -> None:
    # bool is an int subclass; True as a time or a period is a caller's mistake.
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidCalendar(f"{field}: must be an integer, got {value!r}")


def _require_int_or_none(field: str, value: object) -> None:
    if value is not None:
        _require_int(field, value)


def _require_count(field: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{field}: must be >= 0, got {value}")


# --- fire times -------------------------------------------------------------------------


def _fires(calendar: Calendar, after_ms: int) -> Iterator[int]:
    """Every nominal fire after ``after_ms`` inside the bounds, ascending (lazily)."""
    start, end = calendar.start_ms, calendar.end_ms
    floor = after_ms if start is None else max(after_ms, start - 1)
    for fire in _timing_fires(calendar, floor):
        if end is not None and fire > end:
            return
        yield fire


def _timing_fires(calendar: Calendar, floor: int) -> Iterator[int]:
    timing = calendar.timing
    if isinstance(timing, Once):
        return iter([timing.at_ms] if timing.at_ms > floor else [])
    if isinstance(timing, Interval):
        return _interval_fires(timing, floor)
    return _cron_fires(timing.expression, _zone(calendar.time_zone), floor)


def _interval_fires(timing: Interval, floor: int) -> Iterator[int]:
    # Floor division keeps the grid epoch-aligned for instants before 1970 as well.
    k = (floor - timing.offset_ms) // timing.every_ms + 1
    while True:
        yield k * timing.every_ms + timing.offset_ms
        k += 1


def _cron_fires(expression: str, zone: ZoneInfo, floor: int) -> Iterator[int]:
    """Map cronsim's naive wall-time matches to instants, strictly increasing (rules 1-4)."""
    matches = _cronsim(expression, _start_wall(floor, zone))
    last, drops = floor, 0
    while drops <= _MAX_CONSECUTIVE_DROPS:
        try:
            wall = next(matches)  # StopIteration: no match within cronsim's 50 years
        except (StopIteration, OverflowError):  # OverflowError: past datetime's year 9999
            return
        instant = _instant(wall, zone)
        if instant <= last:
            drops += 1  # rule 3: a repeat of an instant already fired or passed
            continue
        last, drops = instant, 0
        yield instant


def _start_wall(floor: int, zone: ZoneInfo) -> datetime:
    """The wall time to search from: the earliest one that maps exactly to ``floor``.

    Normally that is the wall clock at ``floor`` (also when it lies in a repeated hour: rule
    4). Right after a spring-forward it is the gap wall time that rule 1 maps to ``floor``:
    starting from the real clock there would skip the gap times still to come (02:30 maps to
    03:30 and must fire after 03:00), and next_fire from a fire in the gap would disagree
    with iterating on."""
    utc = _EPOCH + floor * _MS
    best = _wall(floor, zone)
    for hours_back in range(_GAP_LOOKBACK_HOURS + 1):
        earlier = (utc - hours_back * _HOUR).replace(tzinfo=UTC).astimezone(zone)
        candidate = utc + _offset(earlier)
        if candidate < best and _instant(candidate, zone) == floor:
            best = candidate
    return best


def _wall(ms: int, zone: ZoneInfo) -> datetime:
    # fold is dropped: cronsim works on plain wall times and _instant re-applies fold=0.
    local = (_EPOCH + ms * _MS).replace(tzinfo=UTC).astimezone(zone)
    return local.replace(tzinfo=None, fold=0)


def _instant(wall: datetime, zone: ZoneInfo) -> int:
    # fold=0: a gap time takes the offset before the gap, a repeated time its first occurrence.
    offset = _offset(wall.replace(tzinfo=zone, fold=0))
    return (wall - offset - _EPOCH) // _MS


def _offset(aware: datetime) -> timedelta:
    offset = aware.utcoffset()
    if offset is None:  # never for a ZoneInfo; the check narrows the type
        raise AssertionError(f"no UTC offset for {aware!r}")
    return offset


def clock_text(ms: int, zone: str) -> str:
    """A time as a person reads it in ``zone``: 09:00, or 09:00:05 (schedules' notes and
    long tasks' continuations)."""
    local = datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone))
    return local.strftime("%H:%M:%S" if local.second or ms % 1000 else "%H:%M")
