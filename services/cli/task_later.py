"""`truerun task later ID (--at TIME | --cron EXPR | --every DURATION)`: the flags of a
continuation turned into a ``ContinuationSpec`` (docs/long-tasks.md "Continuations and
catch-up"). Pure: the server checks the spec again (INVALID_CONTINUATION)."""

from __future__ import annotations

import argparse
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from truerun.v1 import long_task_service_pb2 as pb

from kernel.calendar import InvalidCalendar, parse_interval
from services.cli.task_file import RequestFileError


def add_flags(p: argparse.ArgumentParser) -> None:
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", default="", help="one time: 2026-12-02T09:00 (in --zone)")
    when.add_argument("--cron", default="", help='the next window: "0 9 * * 1-5" (in --zone)')
    when.add_argument("--every", default="", help="the next window of an interval: 1h, 30m")
    p.add_argument("--zone", default="", help="IANA zone of --at and --cron (default: local)")
    p.add_argument("--catchup", default="", help="missed times older than this are reported")
    p.add_argument("--reason", default="", help="why, kept in the task's log")


def spec(args: argparse.Namespace, local_zone: str = "") -> pb.ContinuationSpec:
    """The continuation the flags ask for (RequestFileError: a flag that cannot be read)."""
    zone = args.zone or local_zone or "UTC"
    asked = pb.ContinuationSpec(cron=args.cron, time_zone=zone, reason=args.reason)
    try:
        if args.at:
            moment = datetime.fromisoformat(args.at)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=ZoneInfo(zone))
            asked.at.FromMilliseconds(int(moment.timestamp() * 1000))
        if args.every:
            asked.every.FromMilliseconds(parse_interval(args.every))
        if args.catchup:
            asked.catchup_window.FromMilliseconds(parse_interval(args.catchup))
    except (ValueError, InvalidCalendar, ZoneInfoNotFoundError) as bad:
        raise RequestFileError(f"continuation: {bad}") from None
    return asked
