"""`truerun task later`'s flags as a ContinuationSpec (services/cli/task_later.py): a naive
--at read in the zone, --every and --catchup as durations, bad flags refused before any
call."""

from __future__ import annotations

import argparse

import pytest

from services.cli.task_file import RequestFileError
from services.cli.task_later import spec


def _args(**given: str) -> argparse.Namespace:
    flags = {"at": "", "cron": "", "every": "", "zone": "", "catchup": "", "reason": ""}
    return argparse.Namespace(**(flags | given))


def test_a_naive_time_is_read_in_the_zone() -> None:
    asked = spec(_args(at="2027-01-15T09:00", zone="Europe/Berlin", reason="shop opens"))
    assert asked.at.ToMilliseconds() == 1_800_000_000_000  # 08:00 UTC
    assert (asked.time_zone, asked.reason, asked.cron) == ("Europe/Berlin", "shop opens", "")


def test_a_window_and_its_catch_up() -> None:
    asked = spec(_args(every="1h", catchup="10m"), local_zone="Asia/Tokyo")
    assert asked.every.ToMilliseconds() == 3_600_000
    assert asked.catchup_window.ToMilliseconds() == 600_000
    assert asked.time_zone == "Asia/Tokyo" and not asked.HasField("at")
    assert spec(_args(cron="0 9 * * 1-5")).cron == "0 9 * * 1-5"


@pytest.mark.parametrize(
    "given", [{"at": "tomorrow"}, {"every": "soon"}, {"at": "2027-01-15T09:00", "zone": "Mars/X"}]
)
def test_unreadable_flags_are_refused(given: dict[str, str]) -> None:
    with pytest.raises(RequestFileError, match="continuation: "):
        spec(_args(**given))
