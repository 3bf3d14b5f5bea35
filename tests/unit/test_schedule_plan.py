"""The schedule's pure rules (automations/domain/plan.py): every overlap policy against a
previous run that is running, unknown, finished or absent, with and without a buffered fire;
buffer draining; catch-up after a stop across N fires, inside and outside the window; and a
hypothesis property over random schedules. docs/automations.md has the rules in prose."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automations.domain.calendar import Calendar, Cron, Interval, fires_between, jitter_for
from automations.domain.model import (
    MAX_BUFFERED,
    MAX_FIRES_PER_ROUND,
    Catchup,
    Fire,
    OpenRun,
    Overlap,
    Schedule,
    Source,
    Template,
    fire_key,
)
from automations.domain.plan import (
    MISSED_COUNT_CAP,
    RECHECK_MS,
    Plan,
    apply_overlap,
    plan_round,
    wake_at,
    window_start,
)

BERLIN = ZoneInfo("Europe/Berlin")
MIN, HOUR = 60_000, 3_600_000


def berlin(hh: int, mm: int = 0, ss: int = 0, day: int = 1, month: int = 6) -> int:
    """A wall time in Berlin (CEST in June) as epoch ms."""
    return int(datetime(2026, month, day, hh, mm, ss, tzinfo=BERLIN).timestamp() * 1000)


def utc(hh: int, mm: int = 0, ss: int = 0, day: int = 1) -> int:
    return int(datetime(2026, 6, day, hh, mm, ss, tzinfo=UTC).timestamp() * 1000)


def schedule(calendar: Calendar | None, **changes: object) -> Schedule:
    base = Schedule("p", "nightly", 1, Template("o", "t"), calendar)
    return replace(base, **changes)  # type: ignore[arg-type]


def fire(ms: int) -> Fire:
    return Fire(fire_key("nightly", ms), ms, Source.SCHEDULE)


def words(plan: Plan) -> list[tuple[str, str]]:
    return [(n.type, n.message) for n in plan.notes]


# -- the overlap decision table --------------------------------------------------------------

HALF_HOURLY = Calendar(Interval(30 * MIN), time_zone="Europe/Berlin")
PREVIOUS = ("running", "unknown", "finished", "none")
POLICIES = list(Overlap)


def one_fire_at_nine(policy: Overlap, previous: str, buffered: bool) -> Plan:
    """The 09:00 fire of a half-hourly schedule; the previous run is the 08:00 one (open since
    08:41), the buffer may hold the 08:30 fire."""
    open_runs: tuple[OpenRun, ...] = ()
    if previous in ("running", "unknown"):
        open_runs = (OpenRun("run-8", berlin(8), previous, berlin(8, 41)),)
    s = schedule(
        HALF_HOURLY,
        overlap=policy,
        next_fire_ms=berlin(9),
        buffered=(fire(berlin(8, 30)),) if buffered else (),
        open_runs=("run-8",) if previous != "none" else (),
    )
    return plan_round(s, berlin(9), open_runs)


def expected(policy: Overlap, previous: str, buffered: bool) -> tuple[object, ...]:
    """(creates, cancels, buffered, notes) as fire times in Berlin words, by hand."""
    blocking = f"the 08:00 run is still {previous} since 08:41"
    this_round = "the 08:30 run created in this round is not finished"
    b = ["08:30"] if buffered else []
    if previous in ("finished", "none"):
        if not buffered:
            return ["09:00"], [], [], []
        ran = [("unbuffered", "ran buffered fire 08:30: the earlier run ended")]
        if policy in (Overlap.ALLOW_ALL, Overlap.CANCEL_PREVIOUS):
            return ["08:30", "09:00"], [], [], ran
        if policy is Overlap.SKIP:
            return ["08:30"], [], [], [*ran, ("skipped", f"skipped 09:00: {this_round}")]
        return ["08:30"], [], ["09:00"], [*ran, ("buffered", f"buffered 09:00: {this_round}")]
    if policy is Overlap.ALLOW_ALL:
        return ["09:00"], [], b, []
    if policy is Overlap.SKIP:
        return [], [], b, [("skipped", f"skipped 09:00: {blocking}")]
    if policy is Overlap.CANCEL_PREVIOUS:
        cancel = f"cancel requested for the 08:00 run, still {previous} since 08:41, to start 09:00"
        return ["09:00"], ["run-8"], b, [("cancel_requested", cancel)]
    if policy is Overlap.BUFFER_ONE and buffered:
        already = f"skipped 09:00: {blocking}, and 08:30 already waits in the buffer (buffer_one)"
        return [], [], ["08:30"], [("skipped", already)]
    return [], [], [*b, "09:00"], [("buffered", f"buffered 09:00: {blocking}")]


def hhmm(ms: int, zone: tzinfo = BERLIN) -> str:
    return datetime.fromtimestamp(ms / 1000, zone).strftime("%H:%M")


@pytest.mark.parametrize("buffered", [False, True], ids=["buffer-empty", "buffer-one"])
@pytest.mark.parametrize("previous", PREVIOUS)
@pytest.mark.parametrize("policy", POLICIES, ids=[p.value for p in POLICIES])
def test_overlap_decision_table(policy: Overlap, previous: str, buffered: bool) -> None:
    plan = one_fire_at_nine(policy, previous, buffered)
    got = (
        [hhmm(f.fire_ms) for f in plan.creates],
        list(plan.cancels),
        [hhmm(f.fire_ms) for f in plan.schedule.buffered],
        words(plan),
    )
    assert got == expected(policy, previous, buffered)
    assert [f.key for f in plan.creates] == [fire_key("nightly", f.fire_ms) for f in plan.creates]
    assert plan.schedule.next_fire_ms == berlin(9, 30)
    assert plan.schedule.last_fire_ms == berlin(9)
    waiting = plan.schedule.buffered
    assert plan.schedule.wake_ms == (berlin(9) + RECHECK_MS if waiting else berlin(9, 30))
    if any(t == "skipped" for t, _ in words(plan)):
        assert plan.schedule.last_outcome == "skipped 09:00"


@pytest.mark.parametrize("buffered", [False, True])
@pytest.mark.parametrize("policy", POLICIES)
def test_unknown_is_decided_exactly_like_running(policy: Overlap, buffered: bool) -> None:
    running = one_fire_at_nine(policy, "running", buffered)
    unknown = one_fire_at_nine(policy, "unknown", buffered)
    reworded = [(t, m.replace("unknown", "running")) for t, m in words(unknown)]
    assert (unknown.creates, unknown.cancels, unknown.schedule.buffered) == (
        running.creates,
        running.cancels,
        running.schedule.buffered,
    )
    assert reworded == words(running)


def test_the_issue_sentence_in_utc() -> None:
    s = schedule(Calendar(Interval(HOUR)), next_fire_ms=utc(9))
    plan = plan_round(s, utc(9), (OpenRun("r", utc(8), "unknown", utc(8, 41)),))
    assert words(plan) == [("skipped", "skipped 09:00: the 08:00 run is still unknown since 08:41")]


# -- buffers and cancel_previous ---------------------------------------------------------------

OPEN = (OpenRun("run-8", utc(8), "running", utc(8, 1)),)


def test_a_buffered_fire_runs_only_when_nothing_is_open_and_draining() -> None:
    s = schedule(None, overlap=Overlap.BUFFER_ALL, buffered=(fire(utc(8)), fire(utc(9))))
    idle = apply_overlap(s, utc(10), (), (), drain=False)
    assert idle.creates == () and idle.schedule.buffered == s.buffered
    busy = apply_overlap(s, utc(10), OPEN, (), drain=True)
    assert busy.creates == () and busy.schedule.buffered == s.buffered
    assert busy.schedule.wake_ms == utc(10) + RECHECK_MS
    drained = apply_overlap(s, utc(10), (), (), drain=True)  # oldest first, one per round
    assert drained.creates == (fire(utc(8)),)
    assert drained.schedule.buffered == (fire(utc(9)),)
    assert words(drained) == [("unbuffered", "ran buffered fire 08:00: the earlier run ended")]
    last = apply_overlap(drained.schedule, utc(11), (), (), drain=True)
    assert last.creates == (fire(utc(9)),) and last.schedule.buffered == ()
    assert last.schedule.wake_ms is None  # no calendar, nothing waits


def test_buffer_all_holds_at_most_max_buffered() -> None:
    full = tuple(fire(utc(0) + i * MIN) for i in range(MAX_BUFFERED))
    s = schedule(None, overlap=Overlap.BUFFER_ALL, buffered=full[:-1])
    plan = apply_overlap(s, utc(9), OPEN, (fire(full[-1].fire_ms), fire(utc(9))))
    assert plan.schedule.buffered == full
    assert words(plan)[-1] == (
        "skipped",
        f"skipped 09:00: the 08:00 run is still running since 08:01, "
        f"and the buffer holds {MAX_BUFFERED} fires",
    )


def test_buffer_one_keeps_the_first_fire_and_skips_the_rest() -> None:
    s = schedule(None, overlap=Overlap.BUFFER_ONE)
    plan = apply_overlap(s, utc(9), OPEN, (fire(utc(9)), fire(utc(10)), fire(utc(11))))
    assert plan.creates == () and plan.schedule.buffered == (fire(utc(9)),)
    assert [t for t, _ in words(plan)] == ["buffered", "skipped", "skipped"]
    assert plan.schedule.last_outcome == "skipped 11:00"


def test_cancel_previous_cancels_every_open_run_and_creates() -> None:
    runs = (
        OpenRun("run-7", utc(7), "unknown", utc(7, 50)),
        OpenRun("run-8", utc(8), "running", utc(8, 2)),
    )
    s = schedule(None, overlap=Overlap.CANCEL_PREVIOUS)
    plan = apply_overlap(s, utc(9), runs, (fire(utc(9)),))
    assert plan.cancels == ("run-7", "run-8") and plan.creates == (fire(utc(9)),)
    assert words(plan) == [
        (
            "cancel_requested",
            "cancel requested for the 07:00 run, still unknown since 07:50, to start 09:00",
        ),
        (
            "cancel_requested",
            "cancel requested for the 08:00 run, still running since 08:02, to start 09:00",
        ),
    ]
    assert [n.run_id for n in plan.notes] == ["run-7", "run-8"]


def test_a_backfill_overrides_the_policy_and_later_fires_see_earlier_ones_as_open() -> None:
    s = schedule(None, overlap=Overlap.SKIP)
    fires = (fire(utc(1)), fire(utc(2)))
    assert apply_overlap(s, utc(9), (), fires, overlap=Overlap.ALLOW_ALL).creates == fires
    plan = apply_overlap(s, utc(9), (), fires)
    assert plan.creates == fires[:1]
    assert words(plan) == [
        ("skipped", "skipped 02:00: the 01:00 run created in this round is not finished")
    ]


# -- misfires and catch-up ---------------------------------------------------------------------

HOURLY = Calendar(Interval(HOUR))
MISSED = "while truerun was not running or the schedule was paused"


def missed(n: int, first: str, last: str) -> tuple[str, str]:
    fires = "fire" if n == 1 else "fires"
    outside = f"first {first}, last {last} (outside the catch-up window)"
    return ("missed", f"missed {n} {fires} {MISSED}, {outside}")


def coalesced(n: int, span: str, into: str) -> tuple[str, str]:
    return ("coalesced", f"coalesced {n} late fire{'s' if n > 1 else ''} ({span}) into {into}")


ONE, ALL = Catchup.ONE, Catchup.ALL
# A stop across N hourly fires, the first at 05:00; truerun is back ten minutes after the last.
CATCHUP = [
    # N, window (min), catch-up, created, notes
    (1, 5, ONE, [], [missed(1, "05:00", "05:00")]),
    (1, 15, ONE, ["05:00"], []),
    (3, 5, ONE, [], [missed(3, "05:00", "07:00")]),
    (3, 5, ALL, [], [missed(3, "05:00", "07:00")]),
    (3, 75, ONE, ["07:00"], [missed(1, "05:00", "05:00"), coalesced(1, "06:00", "07:00")]),
    (3, 75, ALL, ["06:00", "07:00"], [missed(1, "05:00", "05:00")]),
    (3, 180, ONE, ["07:00"], [coalesced(2, "05:00..06:00", "07:00")]),
    (3, 180, ALL, ["05:00", "06:00", "07:00"], []),
    (6, 135, ONE, ["10:00"], [missed(3, "05:00", "07:00"), coalesced(2, "08:00..09:00", "10:00")]),
    (6, 135, ALL, ["08:00", "09:00", "10:00"], [missed(3, "05:00", "07:00")]),
    (24, 5, ALL, [], [missed(24, "05:00", "04:00")]),
]


@pytest.mark.parametrize(("n", "window", "catchup", "created", "notes"), CATCHUP)
def test_catchup_after_a_stop_across_n_fires(
    n: int, window: int, catchup: Catchup, created: list[str], notes: list[tuple[str, str]]
) -> None:
    s = schedule(HOURLY, overlap=Overlap.ALLOW_ALL, catchup=catchup, catchup_window_ms=window * MIN)
    s = replace(s, next_fire_ms=utc(5), missed_total=2)
    plan = plan_round(s, utc(5) + (n - 1) * HOUR + 10 * MIN, ())
    assert [hhmm(f.fire_ms, UTC) for f in plan.creates] == created
    assert words(plan) == notes
    assert plan.schedule.next_fire_ms == plan.schedule.wake_ms == utc(5) + n * HOUR
    count = sum(int(message.split()[1]) for kind, message in notes if kind == "missed")
    assert plan.schedule.missed_total == 2 + count


def test_catchup_all_subject_to_skip_runs_the_first_and_skips_the_rest() -> None:
    s = schedule(HOURLY, catchup=Catchup.ALL, catchup_window_ms=3 * HOUR, next_fire_ms=utc(5))
    plan = plan_round(s, utc(7, 10), ())
    assert [f.fire_ms for f in plan.creates] == [utc(5)]
    assert [m for _, m in words(plan)] == [
        "skipped 06:00: the 05:00 run created in this round is not finished",
        "skipped 07:00: the 05:00 run created in this round is not finished",
    ]


def test_catchup_on_a_cron_calendar_across_a_weekend_in_berlin() -> None:
    # Business hours, half past: down from Friday 17:45 to Monday 09:40, a 30 min window.
    cal = Calendar(Cron("30 8-18 * * 1-5"), time_zone="Europe/Berlin")
    s = schedule(cal, catchup_window_ms=30 * MIN, next_fire_ms=berlin(18, 30, day=5))
    plan = plan_round(s, berlin(9, 40, day=8), ())
    assert words(plan) == [missed(2, "18:30", "08:30")]
    assert [f.fire_ms for f in plan.creates] == [berlin(9, 30, day=8)]
    assert plan.schedule.next_fire_ms == berlin(10, 30, day=8)
    assert plan.schedule.missed_total == 2


def test_a_paused_schedule_plans_nothing_and_resuming_meets_the_same_window() -> None:
    s = schedule(HOURLY, paused=True, next_fire_ms=utc(5), wake_ms=utc(5))
    paused = plan_round(s, utc(8, 10), ())
    assert paused == Plan(replace(s, wake_ms=None))
    assert wake_at(s, utc(8, 10)) is None
    resumed = plan_round(replace(s, paused=False), utc(8, 10), ())
    assert words(resumed) == [missed(4, "05:00", "08:00")]
    assert resumed.creates == () and resumed.schedule.next_fire_ms == utc(9)


def test_jitter_delays_a_fire_and_never_makes_it_missed() -> None:
    cal = Calendar(Interval(HOUR), jitter_ms=30 * MIN)
    s = schedule(cal, catchup_window_ms=0, next_fire_ms=utc(9))
    delay = jitter_for(s.trigger_id, utc(9), 30 * MIN)
    assert 0 < delay < 30 * MIN
    assert wake_at(s, utc(8)) == utc(9) + delay
    early = plan_round(s, utc(9) + delay - 1, ())
    assert early.creates == () and early.schedule.next_fire_ms == utc(9)
    due = plan_round(s, utc(9) + delay, ())  # late by more than the 0 ms window: still runs
    assert due.creates == (fire(utc(9)),) and due.notes == ()
    assert window_start(s, utc(9) + delay) == utc(9) + delay - 30 * MIN


def test_missed_fires_are_counted_up_to_the_cap() -> None:
    # Every second, down from 05:00 to 08:00: 10,500 fires before the window's 07:55.
    s = schedule(Calendar(Interval(1_000)), next_fire_ms=utc(5), missed_total=1)
    plan = plan_round(s, utc(8), ())
    assert words(plan) == [
        (
            "missed",
            f"missed 10000+ fires {MISSED}, first 05:00, last before 07:55 "
            "(outside the catch-up window)",
        ),
        ("coalesced", "coalesced 300 late fires (07:55..07:59:59) into 08:00"),
    ]
    assert plan.schedule.missed_total == 1 + MISSED_COUNT_CAP
    assert plan.creates == (fire(utc(8)),) and plan.schedule.next_fire_ms == utc(8, 0, 1)


# -- the property ------------------------------------------------------------------------------

EVERY = st.sampled_from([1_000, 7_000, MIN, 15 * MIN, HOUR])
CRONS = [("*/7 * * * *", 4 * MIN), ("0 2,3 * * *", HOUR), ("*/20 * * * * *", 20_000)]  # spacing


@st.composite
def rounds(draw: st.DrawFn) -> tuple[Schedule, int, tuple[OpenRun, ...]]:
    every = draw(EVERY)
    if draw(st.booleans()):
        cal = Calendar(Interval(every, draw(st.integers(0, every - 1))))
    else:
        expression, every = draw(st.sampled_from(CRONS))
        zone = draw(st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]))
        cal = Calendar(Cron(expression), time_zone=zone)
    jitter = draw(st.sampled_from([0, every // 2]))
    cal = replace(cal, jitter_ms=jitter)
    start = draw(st.integers(utc(0, day=1), utc(0, day=2)))
    first = fires_between(cal, start, start + 10**12, 1)[0]
    now = first + draw(st.integers(-every, 150 * every))
    runs = tuple(OpenRun(f"r{i}", None, "running", None) for i in range(draw(st.integers(0, 2))))
    s = schedule(
        cal,
        next_fire_ms=first,
        overlap=draw(st.sampled_from(list(Overlap))),
        catchup=draw(st.sampled_from(list(Catchup))),
        catchup_window_ms=draw(st.sampled_from([0, every, 20 * every, 200 * every])),
    )
    return s, now, runs


@settings(max_examples=120, deadline=None)
@given(rounds())
def test_plan_round_property(case: tuple[Schedule, int, tuple[OpenRun, ...]]) -> None:
    s, now, runs = case
    assert s.calendar is not None and s.next_fire_ms is not None
    plan = plan_round(s, now, runs)
    window = window_start(s, now)
    nominal = [s.next_fire_ms, *fires_between(s.calendar, s.next_fire_ms, now, 20_000)]
    jitter = s.calendar.jitter_ms
    due = [f for f in nominal if f + jitter_for(s.trigger_id, f, jitter) <= now]
    inside = [f for f in due if f >= window]
    created = [f.fire_ms for f in plan.creates]
    assert len(set(plan.creates)) == len(created) == len({f.key for f in plan.creates})
    assert all(f >= now - s.catchup_window_ms - jitter for f in created)
    assert set(created) <= set(inside)
    per_round = MAX_FIRES_PER_ROUND if s.catchup is Catchup.ALL else len(inside)
    processed = [*due[: len(due) - len(inside)], *inside[:per_round]]
    assert plan.schedule.missed_total == len([f for f in nominal if f < window])
    late = [f for f in due if now - f - jitter_for(s.trigger_id, f, jitter) <= s.catchup_window_ms]
    assert set(late) <= set(inside)  # due no longer ago than the window: never missed
    nxt = plan.schedule.next_fire_ms
    assert nxt is not None and all(nxt > f for f in processed)
    if not due:
        assert plan == apply_overlap(s, now, runs, ())
    if s.overlap is Overlap.ALLOW_ALL and s.catchup is Catchup.ALL:
        assert created == inside[:MAX_FIRES_PER_ROUND]
    if s.catchup is Catchup.ONE and inside:
        assert created == [inside[-1]] or (runs and not created)  # coalesced to the latest
