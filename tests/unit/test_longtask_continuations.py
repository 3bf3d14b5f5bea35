"""The pure catch-up planner of long-task continuations (longtasks/domain/continuations.py;
docs/long-tasks.md "Continuations and catch-up"): what a due continuation does, written out
case by case with the words a person reads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from longtasks.domain.continuations import (
    Continuation,
    ContinuationKind,
    Firing,
    first_due,
    plan_firing,
    spec_refusal,
    waiting_text,
)
from longtasks.domain.display import Shown, display
from longtasks.domain.states import TaskState

H, M = 3_600_000, 60_000
#: 2027-01-15 09:00:00 UTC.
NINE = 1_800_003_600_000


def at(due: int, catchup: int = 15 * M) -> Continuation:
    return Continuation("lt-1", ContinuationKind.AT, 5, due, catchup_window_ms=catchup)


def hourly(due: int, catchup: int = 15 * M) -> Continuation:
    return Continuation(
        "lt-1", ContinuationKind.WINDOW, 5, due, every_ms=H, catchup_window_ms=catchup
    )


def test_not_due_yet_does_nothing() -> None:
    assert plan_firing(at(NINE), NINE - 1) is None
    assert plan_firing(replace(at(NINE), due_ms=None), NINE + H) is None


def test_on_time_releases_the_task_once() -> None:
    assert plan_firing(at(NINE), NINE + 500) == Firing(
        True, None, 0, 0, "continuation due 09:00 released the task"
    )


def test_an_at_continuation_missed_outside_the_window_waits_for_a_person() -> None:
    firing = plan_firing(at(NINE), NINE + 16 * M)
    assert firing == Firing(
        False,
        None,
        1,
        0,
        "missed 1 continuation while truerun was not running (09:00, outside the 15m "
        "catch-up window); waiting for you to continue it: its continuation was missed, "
        "no next window",
    )


def test_three_missed_windows_and_one_inside_coalesce_into_one_release() -> None:
    firing = plan_firing(hourly(NINE), NINE + 3 * H + 10 * M)  # 09, 10, 11 out; 12 in
    assert firing == Firing(
        True,
        None,
        3,
        0,
        "continuation due 12:00 released the task; missed 3 continuations while truerun "
        "was not running (09:00..11:00, outside the 15m catch-up window)",
    )


def test_late_windows_inside_the_catch_up_window_coalesce() -> None:
    firing = plan_firing(hourly(NINE, catchup=3 * H), NINE + 3 * H + 10 * M)
    assert firing is not None and (firing.release, firing.missed, firing.coalesced) == (
        True,
        1,
        2,
    )
    assert firing.text.startswith(
        "continuation due 12:00 released the task (coalesced 2 more late continuations "
        "into this one attempt); missed 1 continuation while truerun was not running (09:00,"
    )


def test_every_window_missed_waits_for_the_next_window() -> None:
    firing = plan_firing(hourly(NINE), NINE + 3 * H + 30 * M)
    assert firing == Firing(
        False,
        NINE + 4 * H,
        4,
        0,
        "missed 4 continuations while truerun was not running (09:00..12:00, outside the "
        "15m catch-up window); waiting for its next window at 13:00 (truerun must be running)",
    )


def test_a_cron_window_is_read_in_its_zone() -> None:
    berlin = Continuation(
        "lt-1", ContinuationKind.WINDOW, 1, None, time_zone="Europe/Berlin", cron="0 9 * * *"
    )
    due = first_due(berlin, NINE)  # 10:00 in Berlin now: the next 09:00 is tomorrow's
    assert due == NINE - H + 24 * H
    assert waiting_text(berlin, due) == (
        "waiting for its next window at 09:00 (truerun must be running)"
    )
    firing = plan_firing(replace(berlin, due_ms=due), due + 2 * 24 * H + 5 * M)
    assert firing is not None and (firing.release, firing.missed) == (True, 2)


def test_first_due_of_an_at_is_the_time_given_even_past() -> None:
    assert first_due(at(NINE), NINE + H) == NINE


@pytest.mark.parametrize(
    ("asked", "refusal"),
    [
        (at(NINE, catchup=1_000), "catchup_window must be between 2 s and 7 days"),
        (at(NINE, catchup=8 * 24 * H), "catchup_window must be between 2 s and 7 days"),
        (replace(at(NINE), due_ms=None), "at must be set, and at most a year ahead"),
        (at(NINE + 400 * 24 * H), "at must be set, and at most a year ahead"),
        (replace(at(NINE), time_zone="Mars/Olympus"), "time_zone: unknown IANA time zone"),
        (replace(hourly(NINE), cron="0 9 * * *"), "window needs exactly one of cron and every"),
        (replace(hourly(NINE), every_ms=None, cron="not cron"), "window: "),
        (replace(hourly(NINE), every_ms=10), "window: "),
    ],
)
def test_unusable_continuations_are_refused_naming_the_field(
    asked: Continuation, refusal: str
) -> None:
    said = spec_refusal(asked, NINE)
    assert said is not None and refusal in said


def test_usable_continuations_pass() -> None:
    assert spec_refusal(at(NINE), NINE) is None
    assert spec_refusal(hourly(NINE), NINE) is None


def test_it_holds_the_task_only_at_its_version_and_until_fired() -> None:
    c = at(NINE)
    assert c.holds(5) and not c.holds(6)
    assert not replace(c, fired_at_ms=NINE).holds(5)


def test_a_held_queued_task_says_what_it_waits_for_not_a_slot() -> None:
    label = waiting_text(hourly(NINE), NINE)
    shown = display(TaskState.QUEUED, waiting=label)
    assert (shown.shown, shown.label) == (
        Shown.QUEUED,
        "waiting for its next window at 09:00 (truerun must be running)",
    )
    assert display(TaskState.QUEUED, ahead=2).label == "queued: 2 ahead of it"
