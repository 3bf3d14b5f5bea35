"""Fire times of schedules (automations/domain/calendar.py) and the DST rules of
docs/automations.md. Expected fires are local wall times converted by zoneinfo alone, never by
the code under test; a trailing ``*`` marks a repeated wall time's second occurrence (fold=1).
"""

from __future__ import annotations

import contextlib
import hashlib
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from automations.domain.calendar import (
    Calendar,
    Cron,
    Interval,
    InvalidCalendar,
    Once,
    Timing,
    fires_between,
    interval_text,
    jitter_for,
    next_fire,
    parse_interval,
    upcoming,
    validate,
)
from kernel import calendar as calendar_module

NY, BERLIN, LH = "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"
HOUR_MS = 3_600_000


def at(zone: str, wall: str) -> int:
    """Epoch ms of a local wall time such as "2026-03-08 03:30" (or "...01:30*") in zone."""
    local = datetime.fromisoformat(wall.rstrip("*")).replace(tzinfo=ZoneInfo(zone))
    return int(local.replace(fold=int(wall.endswith("*"))).timestamp()) * 1000


def walls(zone: str, text: str, day: str = "") -> list[int]:
    """Epoch ms of 2026 wall times "MM-DD HH:MM[:SS]" separated by commas; a time without a
    date is on the date before it ("03-08 01:00, 03:00"), the first one on ``day``."""
    fires = []
    for wall in (part.strip() for part in text.split(",")):
        day, time = wall.split() if " " in wall else (day, wall)
        fires.append(at(zone, f"2026-{day} {time}"))
    return fires


def utc(day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """Epoch ms of a UTC time in January 2026."""
    return int(datetime(2026, 1, day, hour, minute, second, tzinfo=UTC).timestamp()) * 1000


def test_the_transitions_are_where_the_tables_assume() -> None:
    """The tables below rely on these tzdata facts; check them with zoneinfo alone."""
    offsets = {
        (NY, "03-08 01:59"): -5, (NY, "03-08 03:00"): -4, (NY, "11-01 01:30"): -4,
        (NY, "11-01 01:30*"): -5, (BERLIN, "03-29 01:59"): 1, (BERLIN, "03-29 03:00"): 2,
        (BERLIN, "10-25 02:30"): 2, (BERLIN, "10-25 02:30*"): 1, (LH, "10-04 01:59"): 10.5,
        (LH, "10-04 02:30"): 11, (LH, "04-05 01:45"): 11, (LH, "04-05 01:45*"): 10.5,
    }  # fmt: skip
    for (zone, wall), hours in offsets.items():  # UTC offset = wall time - instant
        assert at("UTC", f"2026-{wall}") - at(zone, f"2026-{wall}") == hours * HOUR_MS, wall


DAILY, HOURLY, QUARTER = Cron("30 2 * * *"), Cron("0 * * * *"), Cron("*/15 * * * *")
SECONDS_FIRST = Cron("0 */20 1-3 * * *")  # second 0, minutes 0/20/40, hours 1 to 3
EVERY_HOUR, EVERY_SECOND = Interval(HOUR_MS), Cron("* * * * * *")

# name: (zone, timing, after (local), every fire that follows (local))
DST_CASES: dict[str, tuple[str, Timing, str, str]] = {
    # New York, spring forward 2026-03-08 02:00 EST -> 03:00 EDT
    "ny-spring-daily": (NY, DAILY, "03-06 12:00", "03-07 02:30, 03-08 03:30, 03-09 02:30"),
    "ny-spring-hourly": (NY, HOURLY, "03-08 00:00", "01:00, 03:00, 04:00, 05:00"),
    "ny-spring-quarter": (NY, QUARTER, "03-08 01:30",
                          "01:45, 03:00, 03:15, 03:30, 03:45, 04:00, 04:15"),
    # wall 02:00/02:20/02:40 fire at 03:00/03:20/03:40; the real 03:xx repeat them: dropped
    "ny-spring-seconds-first": (NY, SECONDS_FIRST, "03-08 00:00",
                                "01:00, 01:20, 01:40, 03:00, 03:20, 03:40, 03-09 01:00"),
    "ny-spring-1h": (NY, EVERY_HOUR, "03-08 00:00", "01:00, 03:00, 04:00, 05:00"),
    # wall 02:30 still fires when asked after 03:00 EDT, though the clock there reads 03:00
    "ny-spring-gap-restart": (NY, Cron("0,30 2 * * *"), "03-08 03:00", "03:30, 03-09 02:00"),
    # the 3,600 real 03:mm:ss wall times repeat instants fired from 02:mm:ss: no burst
    "ny-spring-every-second": (NY, EVERY_SECOND, "03-08 01:59:58", "01:59:59, 03:00:00, 03:00:01"),
    "ny-spring-every-second-after": (NY, EVERY_SECOND, "03-08 03:59:59", "04:00:00"),
    # New York, fall back 2026-11-01 02:00 EDT -> 01:00 EST (01:00-01:59 twice)
    "ny-fall-daily": (NY, DAILY, "10-30 12:00", "10-31 02:30, 11-01 02:30, 11-02 02:30"),
    "ny-fall-daily-in-repeat": (NY, Cron("30 1 * * *"), "10-30 12:00",
                                "10-31 01:30, 11-01 01:30, 11-02 01:30"),
    "ny-fall-hourly": (NY, HOURLY, "10-31 23:00", "11-01 00:00, 01:00, 02:00, 03:00"),
    "ny-fall-quarter": (NY, QUARTER, "11-01 01:30", "01:45, 02:00, 02:15, 02:30"),
    "ny-fall-seconds-first": (NY, SECONDS_FIRST, "11-01 00:00", "01:00, 01:20, 01:40, "
                              "02:00, 02:20, 02:40, 03:00, 03:20, 03:40, 11-02 01:00"),
    "ny-fall-1h": (NY, EVERY_HOUR, "11-01 00:00", "01:00, 01:00*, 02:00, 03:00"),
    # after a time in the repeat (rule 4), nothing in the repeated hour fires again
    "ny-fall-in-repeat-hourly": (NY, HOURLY, "11-01 01:30*", "02:00, 03:00"),
    "ny-fall-in-repeat-quarter": (NY, QUARTER, "11-01 01:30*", "02:00, 02:15"),
    "ny-fall-in-repeat-daily": (NY, Cron("30 1 * * *"), "11-01 01:00*", "11-02 01:30"),
    "ny-fall-in-repeat-seconds": (NY, SECONDS_FIRST, "11-01 01:10*", "02:00, 02:20"),
    "ny-fall-in-repeat-every-second": (NY, EVERY_SECOND, "11-01 01:00*", "02:00:00"),
    # Berlin, spring forward 2026-03-29 02:00 CET -> 03:00 CEST
    "berlin-spring-daily": (BERLIN, DAILY, "03-27 12:00", "03-28 02:30, 03-29 03:30, 03-30 02:30"),
    "berlin-spring-hourly": (BERLIN, HOURLY, "03-29 00:00", "01:00, 03:00, 04:00"),
    "berlin-spring-quarter": (BERLIN, QUARTER, "03-29 01:30",
                              "01:45, 03:00, 03:15, 03:30, 03:45, 04:00"),
    "berlin-spring-seconds-first": (BERLIN, SECONDS_FIRST, "03-29 00:00",
                                    "01:00, 01:20, 01:40, 03:00, 03:20, 03:40, 03-30 01:00"),
    "berlin-spring-1h": (BERLIN, EVERY_HOUR, "03-29 00:00", "01:00, 03:00, 04:00"),
    # Berlin, fall back 2026-10-25 03:00 CEST -> 02:00 CET (02:00-02:59 twice)
    "berlin-fall-daily": (BERLIN, DAILY, "10-23 12:00", "10-24 02:30, 10-25 02:30, 10-26 02:30"),
    "berlin-fall-hourly": (BERLIN, HOURLY, "10-25 00:00", "01:00, 02:00, 03:00, 04:00"),
    "berlin-fall-quarter": (BERLIN, QUARTER, "10-25 02:30", "02:45, 03:00, 03:15"),
    "berlin-fall-seconds-first": (BERLIN, SECONDS_FIRST, "10-25 00:00", "01:00, 01:20, "
                                  "01:40, 02:00, 02:20, 02:40, 03:00, 03:20, 03:40, 10-26 01:00"),
    "berlin-fall-1h": (BERLIN, EVERY_HOUR, "10-25 00:00", "01:00, 02:00, 02:00*, 03:00"),
    "berlin-fall-in-repeat-quarter": (BERLIN, QUARTER, "10-25 02:30*", "03:00, 03:15"),
    "berlin-fall-in-repeat-daily": (BERLIN, DAILY, "10-25 02:00*", "10-26 02:30"),
    # Lord Howe, a 30-minute shift: 2026-10-04 02:00 -> 02:30, 2026-04-05 02:00 -> 01:30
    "lh-spring-quarter": (LH, QUARTER, "10-04 01:30", "01:45, 02:30, 02:45, 03:00"),
    "lh-spring-hourly": (LH, HOURLY, "10-04 00:00", "01:00, 02:30, 03:00"),
    "lh-spring-daily-in-gap": (LH, Cron("15 2 * * *"), "10-02 12:00",
                               "10-03 02:15, 10-04 02:45, 10-05 02:15"),
    "lh-spring-1h": (LH, EVERY_HOUR, "10-04 00:00", "00:30, 01:30, 03:00"),  # UTC hours
    "lh-fall-quarter": (LH, QUARTER, "04-05 01:00", "01:15, 01:30, 01:45, 02:00"),
}  # fmt: skip


@pytest.mark.parametrize("case", DST_CASES.values(), ids=DST_CASES.keys())
def test_fires_across_dst_transitions(case: tuple[str, Timing, str, str]) -> None:
    zone, timing, after_wall, fires_text = case
    [after] = walls(zone, after_wall)
    expected = walls(zone, fires_text, day=after_wall.split()[0])
    calendar = validate(Calendar(timing, zone))
    assert upcoming(calendar, after, len(expected)) == expected
    assert fires_between(calendar, after, expected[-1], 100) == expected
    # next_fire from each fire gives the next one: restarting never skips or repeats
    assert [next_fire(calendar, fire) for fire in [after, *expected[:-1]]] == expected


def test_hourly_fires_once_per_instant_on_transition_days() -> None:
    hourly = Calendar(HOURLY, NY)
    days = walls(NY, "03-07 23:59, 03-08 23:00, 10-31 23:59, 11-01 23:00")
    spring = fires_between(hourly, days[0], days[1], 100)
    assert len(spring) == 23 and all(b - a == HOUR_MS for a, b in pairwise(spring))
    # the 25-hour day has 24 fires: the repeated 01:00 EST does not fire
    assert len(fires_between(hourly, days[2], days[3], 100)) == 24


def test_a_cap_on_dropped_repeats_ends_a_search(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calendar_module, "_MAX_CONSECUTIVE_DROPS", 10)
    in_repeat, after_gap = walls(NY, "11-01 01:00*, 03-08 03:59:59")
    assert next_fire(Calendar(EVERY_SECOND, NY), in_repeat) is None  # 3,599 drops to 02:00
    assert next_fire(Calendar(EVERY_SECOND, NY), after_gap) is None  # 3,600 drops to 04:00


def test_utc_seconds_day_fields_and_intervals() -> None:
    every_ten, ten = Calendar(Cron("*/10 * * * * *")), utc(1, 0, 0, 10)
    assert upcoming(every_ten, utc(1, 0, 0, 5), 3) == [ten, ten + 10_000, ten + 20_000]
    assert next_fire(every_ten, ten) == ten + 10_000  # strictly after
    assert (next_fire(every_ten, ten - 1), next_fire(every_ten, ten + 1)) == (ten, ten + 10_000)
    assert upcoming(Calendar(QUARTER), utc(1, 0, 7), 2) == [utc(1, 0, 15), utc(1, 0, 30)]
    month_end = Calendar(Cron("0 9 L * *"))
    assert upcoming(month_end, utc(1), 3) == walls("UTC", "01-31 09:00, 02-28 09:00, 03-31 09:00")
    first_monday = Calendar(Cron("0 12 * * MON#1"), BERLIN)
    assert upcoming(first_monday, utc(1), 2) == walls(BERLIN, "01-05 12:00, 02-02 12:00")
    five_past = Calendar(Interval(15 * 60_000, 5 * 60_000), NY)  # :05, :20, :35, :50 UTC
    assert upcoming(five_past, utc(1, 0, 0), 3) == [utc(1, 0, 5), utc(1, 0, 20), utc(1, 0, 35)]
    assert next_fire(five_past, utc(1, 0, 5)) == utc(1, 0, 20)
    assert upcoming(Calendar(Interval(HOUR_MS)), -HOUR_MS - 1, 2) == [-HOUR_MS, 0]


def test_bounds_once_and_the_end_of_a_schedule() -> None:
    bounded = Calendar(HOURLY, start_ms=utc(1, 3), end_ms=utc(1, 5))
    assert upcoming(bounded, utc(1, 0), 10) == [utc(1, 3), utc(1, 4), utc(1, 5)]
    assert next_fire(bounded, utc(1, 5)) is None
    assert next_fire(Calendar(HOURLY, start_ms=utc(1, 3, 30)), utc(1, 0)) == utc(1, 4)
    interval = Calendar(Interval(HOUR_MS), start_ms=utc(1, 3), end_ms=utc(1, 4))
    assert upcoming(interval, 0, 10) == [utc(1, 3), utc(1, 4)]
    noon = utc(1, 12)
    assert next_fire(Calendar(Once(noon)), noon - 1) == noon
    assert upcoming(Calendar(Once(noon)), 0, 5) == [noon]
    assert next_fire(Calendar(Once(noon)), noon) is None
    assert next_fire(Calendar(Once(noon), start_ms=noon, end_ms=noon), 0) == noon
    # outside the bounds is valid, and never fires
    assert next_fire(validate(Calendar(Once(noon), start_ms=noon + 1)), 0) is None
    assert next_fire(validate(Calendar(Once(noon), end_ms=noon - 1)), 0) is None
    # the end reached, or (below) February 1st or 30th that is also a fifth Monday: never,
    # within cronsim's 50 years
    assert next_fire(Calendar(HOURLY, end_ms=utc(1, 5)), utc(1, 5)) is None
    assert next_fire(Calendar(Interval(HOUR_MS), end_ms=utc(1, 5)), utc(1, 5)) is None
    never = validate(Calendar(Cron("0 0 */29 2 MON#5")))
    assert next_fire(never, utc(1)) is None
    assert upcoming(never, utc(1), 3) == []


def test_fires_between_and_upcoming_counts() -> None:
    quarter, start, end = Calendar(QUARTER), utc(1, 0), utc(1, 1)
    quarters = [utc(1, 0, 15), utc(1, 0, 30), utc(1, 0, 45), utc(1, 1, 0)]
    assert fires_between(quarter, start, end, 100) == quarters
    assert fires_between(quarter, start, end, 2) == quarters[:2]
    assert fires_between(quarter, start, utc(1, 0, 14), 100) == []
    assert fires_between(quarter, end, start, 100) == fires_between(quarter, start, end, 0) == []
    assert len(upcoming(quarter, start, 500)) == 500 and upcoming(quarter, start, 0) == []
    with pytest.raises(ValueError, match="limit"):
        fires_between(quarter, 0, 1, -1)
    with pytest.raises(ValueError, match="count"):
        upcoming(quarter, 0, -1)


REFUSED: dict[str, tuple[Calendar, str]] = {
    "four-fields": (Calendar(Cron("* * * *")), r"expression: '\* \* \* \*' has 4 fields"),
    "seven-fields": (Calendar(Cron("0 0 0 * * * 2026")), "timing.expression: .* 7 fields"),
    "empty-cron": (Calendar(Cron("")), "timing.expression: '' has 0 fields"),
    "bad-minute": (Calendar(Cron("61 * * * *")), "timing.expression: '61 \\* .*Bad minute"),
    "zero-step": (Calendar(Cron("*/0 * * * *")), "timing.expression: .*Bad minute"),
    "bad-second": (Calendar(Cron("60 * * * * *")), "timing.expression: .*Bad second"),
    "bad-weekday": (Calendar(Cron("0 0 * * FUN")), "timing.expression: .*Bad day-of-week"),
    "never-a-day": (Calendar(Cron("0 0 30 2 *")), "timing.expression: .*Bad day-of-month"),
    "not-text": (Calendar(Cron(5)), "timing.expression: must be text"),  # type: ignore[arg-type]
    "not-a-timing": (Calendar("daily"), "timing: must be Cron, Interval or Once, got str"),  # type: ignore[arg-type]
    "unknown-zone": (Calendar(HOURLY, "Mars/Olympus"), "time_zone: unknown IANA time zone"),
    "path-zone": (Calendar(HOURLY, "../etc/passwd"), "time_zone: unknown IANA time zone"),
    "empty-zone": (Calendar(HOURLY, ""), "time_zone: must be an IANA zone name"),
    "host-zone": (Calendar(HOURLY, "localtime"), "time_zone: 'localtime' is the host's zone"),
    "short-interval": (Calendar(Interval(99)), "timing.every_ms: must be at least 100"),
    "float-interval": (Calendar(Interval(1.5e3)), "timing.every_ms: must be an integer"),  # type: ignore[arg-type]
    "bool-interval": (Calendar(Interval(True)), "timing.every_ms: must be an integer"),
    "offset-too-big": (Calendar(Interval(1000, 1000)), "timing.offset_ms: must be in \\[0, every"),
    "negative-offset": (Calendar(Interval(1000, -1)), "timing.offset_ms: must be in"),
    "once-not-int": (Calendar(Once("noon")), "timing.at_ms: must be an integer"),  # type: ignore[arg-type]
    "start-not-int": (Calendar(HOURLY, start_ms="0"), "start_ms: must be an integer"),  # type: ignore[arg-type]
    "end-before-start": (Calendar(HOURLY, start_ms=10, end_ms=9), "end_ms: 9 is before start_ms"),
    "negative-jitter": (Calendar(HOURLY, jitter_ms=-1), "jitter_ms: must be in \\[0, 3600000\\]"),
    "jitter-over-an-hour": (Calendar(Once(0), jitter_ms=3_600_001), "jitter_ms: must be in"),
    "jitter-of-interval": (Calendar(Interval(60_000), jitter_ms=60_000), "jitter_ms: must be less "
                           "than the schedule's smallest period \\(60000 ms\\)"),
    "jitter-of-quarter": (Calendar(QUARTER, jitter_ms=900_000), "period \\(900000 ms\\)"),
    "jitter-of-seconds": (Calendar(Cron("*/20 * * * * *"), jitter_ms=20_000), "\\(20000 ms\\)"),
    "jitter-over-midnight": (Calendar(Cron("0 0,23 * * *"), jitter_ms=HOUR_MS), "\\(3600000 ms\\)"),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_validate_refuses_with_a_one_line_message(case: tuple[Calendar, str]) -> None:
    calendar, message = case
    with pytest.raises(InvalidCalendar, match=message) as raised:
        validate(calendar)
    assert "\n" not in str(raised.value)
    with pytest.raises(InvalidCalendar):  # the computing functions validate too
        next_fire(calendar, 0)


ACCEPTED = [
    Calendar(Cron("0 9 * * MON-FRI"), BERLIN, start_ms=0, end_ms=0), Calendar(Cron("0 0 29 2 *")),
    Calendar(Cron("0 0 * 2 MON#5")), Calendar(QUARTER, jitter_ms=899_999),
    Calendar(EVERY_SECOND, jitter_ms=999), Calendar(Cron("0 3 * * *"), jitter_ms=HOUR_MS),
    Calendar(Interval(1000, 999), jitter_ms=999), Calendar(Once(-5), jitter_ms=HOUR_MS),
    Calendar(Once(0), LH, start_ms=1, end_ms=2),  # a Once outside its bounds is valid
]  # fmt: skip


@pytest.mark.parametrize("calendar", ACCEPTED, ids=str)
def test_validate_accepts_and_returns_the_calendar(calendar: Calendar) -> None:
    assert validate(calendar) is calendar


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789*/-,#LWMONJAFEBSUTHD ?", max_size=30))
def test_validate_of_any_cron_text_raises_only_invalid_calendar(text: str) -> None:
    with contextlib.suppress(InvalidCalendar):
        validate(Calendar(Cron(text)))


def test_jitter_follows_its_formula_and_spreads() -> None:
    assert jitter_for("schedule-1", 1_780_000_000_000, 0) == 0
    digest = hashlib.sha256(b"schedule-1\x001780000000000").digest()
    expected = int.from_bytes(digest[:8], "big") % 60_000
    assert jitter_for("schedule-1", 1_780_000_000_000, 60_000) == expected
    for bad in (-1, 3_600_001):
        with pytest.raises(InvalidCalendar, match="jitter_ms"):
            jitter_for("schedule-1", 0, bad)
    # spread over the window, across schedules and across the fires of one schedule
    delays = [jitter_for(f"schedule-{i}", 1_780_000_000_000, 60_000) for i in range(2_000)]
    assert len(set(delays)) > 1_900 and 27_000 < sum(delays) / len(delays) < 33_000
    per_fire = {jitter_for("schedule-1", fire, 60_000) for fire in range(0, 2_000_000, 1_000)}
    assert len(per_fire) > 1_900


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.integers(-(2**50), 2**50), st.integers(0, 3_600_000))
def test_jitter_is_deterministic_and_inside_the_window(key: str, fire: int, window: int) -> None:
    delay = jitter_for(key, fire, window)
    assert delay == jitter_for(key, fire, window)
    assert 0 <= delay < window or delay == window == 0


DURATIONS: dict[str, int | None] = {
    "90s": 90_000, "15m": 900_000, "1h30m": 5_400_000, "2d": 172_800_000, "90": 90_000,
    "1s500ms": 1_500, "1500ms": 1_500, " 5m ": 300_000, "1d2h3m4s5ms": 93_784_005, "1": 1_000,
    # refused: under 100 ms, not a duration, units repeated or out of order, non-ASCII
    "500ms": 500, "99ms": None, "0": None, "0s": None, "": None, "  ": None, "1.5h": None,
    "h": None, "1h1h": None, "30m1h": None, "-5s": None, "5 m": None, "1H": None, "1w": None,
    "s1": None, "\u0661\u0662s": None, "\u0661\u0662": None, "9" * 13: None,
}  # fmt: skip


@pytest.mark.parametrize(("text", "ms"), DURATIONS.items())
def test_parse_interval(text: str, ms: int | None) -> None:
    if ms is not None:
        assert parse_interval(text) == ms
    else:
        with pytest.raises(InvalidCalendar, match=r"^interval: "):
            parse_interval(text)


def test_interval_text() -> None:
    shown = [interval_text(ms) for ms in (5_400_000, 15_000, 172_800_000, 1_500, 0, -60_000)]
    assert shown == ["1h30m", "15s", "2d", "1s500ms", "0s", "-1m"]


@given(st.integers(1_000, 10**15))
def test_interval_text_round_trips(ms: int) -> None:
    assert parse_interval(interval_text(ms)) == ms


ZONES = ["UTC", NY, BERLIN, LH, "Australia/Sydney", "Asia/Kolkata", "Pacific/Chatham",
         "America/Santiago", "Europe/Dublin"]  # fmt: skip


@cache
def _transitions() -> list[int]:
    """Every hour of 2026 in which one of ZONES changes its UTC offset (zoneinfo only)."""
    hours = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(8_760)]
    return [
        int(b.timestamp()) * 1000
        for zone in map(ZoneInfo, ZONES)
        for a, b in pairwise(hours)
        if a.astimezone(zone).utcoffset() != b.astimezone(zone).utcoffset()
    ]


CRON_SPECS = st.builds(
    lambda *fields: " ".join(field for field in fields if field),
    st.sampled_from(["", "", "0", "30", "*/20", "15,45"]),  # seconds: optional, first
    st.sampled_from(["*", "0", "30", "*/15", "0,30", "*/7", "5-10", "59", "45"]),
    st.sampled_from(["*", "0", "1", "2", "3", "1-3", "*/2", "0,23", "2,3", "22-23"]),
    st.sampled_from(["*", "*", "1", "L", "15", "*/2"]),
    st.sampled_from(["*", "*", "3,4,10,11", "*/3"]),
    st.sampled_from(["*", "*", "0", "1-5", "SUN"]),
)
AFTER = st.one_of(  # anywhere in 2026, or within 4 hours of a transition
    st.integers(utc(1), utc(1) + 365 * 24 * HOUR_MS),
    st.builds(lambda t, shift: t + shift, st.sampled_from(_transitions()),
              st.integers(-4 * HOUR_MS, 4 * HOUR_MS)),
)  # fmt: skip


def _reference(expression: str, zone_name: str, after: int, count: int) -> list[int]:
    """The rules as a model: every wall time from two days back, mapped with fold=0; keep an
    instant only when it is later than every instant before it and than ``after``."""
    zone = ZoneInfo(zone_name)
    start = datetime.fromtimestamp(after / 1000, zone).replace(tzinfo=None) - timedelta(days=2)
    fires, latest = [], after
    for match in CronSim(expression, start):
        instant = int(match.replace(tzinfo=zone).timestamp()) * 1000
        fires += [instant] if instant > latest else []
        latest = max(latest, instant)
        if len(fires) == count:
            return fires
    return fires


@settings(max_examples=250, deadline=None)
@given(CRON_SPECS, st.sampled_from(ZONES), AFTER)
def test_cron_fires_increase_and_chain(expression: str, zone: str, after: int) -> None:
    calendar = validate(Calendar(Cron(expression), zone))
    fires = upcoming(calendar, after, 6)
    assert len(fires) == 6 and fires == _reference(expression, zone, after, 6)
    assert after < fires[0] and all(a < b for a, b in pairwise(fires))
    assert all(fire % 1000 == 0 for fire in fires)
    assert [next_fire(calendar, fire) for fire in [after, *fires[:-1]]] == fires
    assert fires_between(calendar, after, fires[-1], 100) == fires


@settings(max_examples=100, deadline=None)
@given(st.integers(1_000, 10 * HOUR_MS), st.data(), st.sampled_from(ZONES), AFTER)
def test_intervals_ignore_dst(every: int, data: st.DataObject, zone: str, after: int) -> None:
    offset = data.draw(st.integers(0, every - 1))
    fires = upcoming(Calendar(Interval(every, offset), zone), after, 4)
    assert after < fires[0] <= after + every
    assert all(fire % every == offset for fire in fires)
    assert all(b - a == every for a, b in pairwise(fires))
