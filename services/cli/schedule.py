"""`truerun schedule create | ls | show | pause | resume | fire | backfill | rm |
rotate-secret`: schedules (ScheduleService, docs/automations.md) from the command line.

Times given are ISO 8601 (without an offset: this machine's local time); durations are 90s,
15m, 1h30m, 2d (automations/domain/calendar.py ``parse_interval``). Times shown are in local
time, and next fires also in the schedule's zone. Every command takes ``-o json|yaml``: the
response as protobuf JSON or YAML (``show``: the schedule, its upcoming fires and its events).

Exit status (services/cli/errors.py): 0 done; 2 it could not be done, said in one line on
stderr with the error's code and reason: a bad flag value here, a refusal by the server
(INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, UNAUTHENTICATED, ...) or a
server that cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import NoReturn

import grpc
from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2
from google.protobuf.message import Message
from truerun.v1 import run_service_pb2
from truerun.v1 import schedule_service_pb2 as pb
from truerun.v1.schedule_service_pb2_grpc import ScheduleServiceStub as Stub

from automations.domain.calendar import InvalidCalendar, parse_interval
from services.cli.client import Client, fail, run_line
from services.cli.errors import at_least, int32
from services.cli.output import add_output_flag, emit
from services.cli.schedule_view import (
    describe,
    fired_text,
    next_text,
    table,
    timing_text,
    zone_of,
)

BAD_INPUT = 2
EVENTS_SHOWN = 20
UPCOMING_SHOWN = 5
OPEN_RUNS_SHOWN = 10
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
OVERLAPS = {
    "skip": pb.OVERLAP_POLICY_SKIP,
    "buffer_one": pb.OVERLAP_POLICY_BUFFER_ONE,
    "buffer_all": pb.OVERLAP_POLICY_BUFFER_ALL,
    "cancel_previous": pb.OVERLAP_POLICY_CANCEL_PREVIOUS,
    "allow_all": pb.OVERLAP_POLICY_ALLOW_ALL,
}
CATCHUPS = {"one": pb.CATCHUP_POLICY_ONE, "all": pb.CATCHUP_POLICY_ALL}


class BadInput(Exception):
    """A flag value the command cannot use: one line on stderr, exit 2."""


class _OneLineParser(argparse.ArgumentParser):
    """Usage mistakes in one line on stderr (exit 2), not the usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(BAD_INPUT)


# -- the parsers ------------------------------------------------------------------------------


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    client_flags: Callable[[argparse.ArgumentParser], None],
) -> None:
    """`truerun schedule ...`; ``client_flags`` adds --server and --token to each command."""
    top = sub.add_parser("schedule", help="schedules: run templates that fire on a calendar")
    commands = top.add_subparsers(dest="schedule_cmd", required=True, parser_class=_OneLineParser)

    def command(name: str, help_text: str, *, named: bool = True) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help_text, description=help_text)
        client_flags(p)
        add_output_flag(p, "the response")
        if named:
            p.add_argument("schedule_id", help="the schedule's id")
            p.add_argument("--project", default="default", help="(default: default)")
        return p

    create = command("create", "create a schedule; prints it and its next fire times")
    create.add_argument("--task", required=True, help="the task each run runs")
    create.add_argument("--owner", required=True, help="whose runtimes run the runs")
    timing = create.add_mutually_exclusive_group()
    timing.add_argument("--cron", help="5 fields, or 6 with seconds first")
    timing.add_argument("--every", help="an interval: 90s, 15m, 1h30m, 2d")
    timing.add_argument("--at", help="once, at this ISO 8601 time")
    create.add_argument("--offset", help="with --every: shift from the epoch-aligned times")
    create.add_argument("--tz", default="", help="IANA zone the cron fields are read in (UTC)")
    create.add_argument("--start", help="no fire before this ISO 8601 time")
    create.add_argument("--end", help="no fire after this ISO 8601 time")
    create.add_argument("--jitter", help="delay each fire by a stable amount below this")
    create.add_argument("--overlap", choices=OVERLAPS, help="while a run is open (skip)")
    create.add_argument("--catchup", choices=CATCHUPS, help="missed fires in the window (one)")
    create.add_argument("--catchup-window", help="older missed fires are only recorded (5m)")
    create.add_argument("--agent", default="", help="the agent each run asks for (any)")
    create.add_argument("--priority", type=int32, default=0, help="higher runs first (0)")
    create.add_argument(
        "--max-attempts", type=at_least(1), default=1, help="attempts before a run fails (>= 1)"
    )
    create.add_argument("--label", action="append", default=[], help="required runtime label")
    create.add_argument(
        "--command",
        dest="run_command",
        metavar="COMMAND",
        default="",
        help="the command a runtime should run",
    )
    create.add_argument("--webhook", action="store_true", help="accept signed deliveries")
    create.add_argument("--name", default="", help="a display name")

    listing = command("ls", "list schedules: timing, next fire, last outcome", named=False)
    listing.add_argument("--project", default="", help="default: every project you see")
    command("show", "one schedule: template, policies, next fires, recent events")
    pause = command("pause", "pause a schedule (its calendar fires nothing until resumed)")
    pause.add_argument("--note", default="", help="why, for people to read")
    command("resume", "resume a paused schedule (missed fires meet the catch-up window)")
    command("fire", "fire now (the overlap policy applies); prints the run or the note")
    backfill = command("backfill", "fire every calendar time in a past range, once each")
    backfill.add_argument("--from", dest="start", required=True, help="ISO 8601, inclusive")
    backfill.add_argument("--to", dest="end", required=True, help="ISO 8601, inclusive")
    backfill.add_argument("--overlap", choices=OVERLAPS, help="override for this backfill")
    command("rm", "delete a schedule (its runs and events stay)")
    command("rotate-secret", "a new webhook secret, shown once (turns the webhook on)")


def run(client: Client, args: argparse.Namespace) -> int:
    try:
        response, text = _COMMANDS[args.schedule_cmd](client.schedules, client, args)
    except BadInput as exc:
        print(f"error: {exc} [INVALID_ARGUMENT]", file=sys.stderr)
        return BAD_INPUT
    except grpc.RpcError as error:
        return fail(error)  # refused or unreachable: one line, exit 2
    emit(args.output, response, text)
    return 0


# -- input ------------------------------------------------------------------------------------


def parse_time(flag: str, text: str) -> timestamp_pb2.Timestamp:
    """ISO 8601, with or without an offset (without: this machine's local time)."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInput(
            f"{flag}: {text!r} is not an ISO 8601 time like 2026-11-29T09:00 or "
            "2026-11-29T09:00:00+01:00"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # naive: local time
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds((parsed - _EPOCH) // timedelta(milliseconds=1))
    return stamp


def parse_duration(flag: str, text: str, zero: bool = False) -> duration_pb2.Duration:
    """90s, 15m, 1h30m, 2d (at least 1 s; ``zero``: "0" too)."""
    value = duration_pb2.Duration()
    if zero and text.strip() in ("0", "0s"):
        return value
    try:
        value.FromMilliseconds(parse_interval(text))
    except InvalidCalendar as exc:
        raise BadInput(f"{flag}: {str(exc).removeprefix('interval: ')}") from None
    return value


def schedule_from_args(args: argparse.Namespace) -> pb.Schedule:
    spec = struct_pb2.Struct()
    if args.run_command:
        spec.update({"command": args.run_command})
    s = pb.Schedule(
        project_id=args.project,
        schedule_id=args.schedule_id,
        display_name=args.name,
        template=pb.RunTemplate(
            owner_id=args.owner,
            task_id=args.task,
            agent_id=args.agent,
            priority=args.priority,
            max_attempts=args.max_attempts,
            required_labels=args.label,
            spec=spec,
        ),
        overlap_policy=OVERLAPS[args.overlap] if args.overlap else pb.OVERLAP_POLICY_UNSPECIFIED,
        catchup_policy=CATCHUPS[args.catchup] if args.catchup else pb.CATCHUP_POLICY_UNSPECIFIED,
        webhook_enabled=args.webhook,
    )
    if args.catchup_window is not None:
        s.catchup_window.CopyFrom(parse_duration("--catchup-window", args.catchup_window, True))
    if args.offset is not None and args.every is None:
        raise BadInput("--offset: only with --every")
    if args.cron is not None:
        s.spec.cron = args.cron
    elif args.every is not None:
        s.spec.interval.CopyFrom(parse_duration("--every", args.every))
        if args.offset is not None:
            s.spec.interval_offset.CopyFrom(parse_duration("--offset", args.offset, True))
    elif args.at is not None:
        s.spec.at.CopyFrom(parse_time("--at", args.at))
    if args.tz:
        s.spec.time_zone = args.tz
    if args.start is not None:
        s.spec.start_time.CopyFrom(parse_time("--start", args.start))
    if args.end is not None:
        s.spec.end_time.CopyFrom(parse_time("--end", args.end))
    if args.jitter is not None:
        s.spec.jitter.CopyFrom(parse_duration("--jitter", args.jitter, True))
    return s


# -- the commands: each returns its response (printed by -o json) and its text --------------

Shown = tuple[Message | dict[str, object], str]


def _upcoming(stub: Stub, timeout: float, s: pb.Schedule) -> pb.ListUpcomingFiresResponse:
    ask = pb.ListUpcomingFiresRequest(
        project_id=s.project_id, schedule_id=s.schedule_id, count=UPCOMING_SHOWN
    )
    return stub.ListUpcomingFires(ask, timeout=timeout)


def _create(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    request = pb.CreateScheduleRequest(schedule=schedule_from_args(args))
    response = stub.CreateSchedule(request, timeout=client.timeout)
    text = describe(response.schedule, _upcoming(stub, client.timeout, response.schedule))
    return response, text + _secret_text(response.webhook_secret)


def _secret_text(secret: str) -> str:
    if not secret:
        return ""
    return (
        f"\nwebhook secret  {secret}"
        "\n  (shown only now: truerun keeps no copy; sign deliveries with it)"
    )


def _rotate(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.RotateWebhookSecretRequest(project_id=args.project, schedule_id=args.schedule_id)
    response = stub.RotateWebhookSecret(ask, timeout=client.timeout)
    path = response.schedule.webhook_path
    text = f"{args.schedule_id}  webhook on: POST {path}" + _secret_text(response.webhook_secret)
    return response, text + "\n  (the previous secret no longer verifies)"


def _ls(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    found, token = pb.ListSchedulesResponse(), ""
    while True:
        ask = pb.ListSchedulesRequest(project_id=args.project, page_token=token)
        page = stub.ListSchedules(ask, timeout=client.timeout)
        found.schedules.extend(page.schedules)
        if not (token := page.next_page_token):
            break
    header = ["ID", "TIMING", "ZONE", "NEXT FIRE (local)", "LAST OUTCOME", "MISSED"]
    rows = [
        [
            s.schedule_id if args.project else f"{s.project_id}/{s.schedule_id}",
            timing_text(s),
            zone_of(s),
            next_text(s),
            s.last_outcome or "-",
            str(s.missed_total),
        ]
        for s in found.schedules
    ]
    return found, table(header, rows) if rows else "no schedules"


def _show(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.GetScheduleRequest(project_id=args.project, schedule_id=args.schedule_id)
    s = stub.GetSchedule(ask, timeout=client.timeout)
    upcoming = _upcoming(stub, client.timeout, s)
    events = stub.ListScheduleEvents(
        pb.ListScheduleEventsRequest(
            project_id=s.project_id, schedule_id=s.schedule_id, page_size=EVENTS_SHOWN
        ),
        timeout=client.timeout,
    ).events
    shown: dict[str, object] = {
        "schedule": json_format.MessageToDict(s),
        "upcoming": json_format.MessageToDict(upcoming),
        "events": [json_format.MessageToDict(e) for e in events],
    }
    if args.output != "text":
        return shown, ""
    runs = [
        run_line(client.stub.GetRun(run_service_pb2.GetRunRequest(id=i), timeout=client.timeout))
        for i in s.open_run_ids[:OPEN_RUNS_SHOWN]
    ]
    return shown, describe(s, upcoming, events, runs)


def _pause(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.PauseScheduleRequest(
        project_id=args.project, schedule_id=args.schedule_id, note=args.note
    )
    s = stub.PauseSchedule(ask, timeout=client.timeout)
    return s, f"{s.schedule_id}  {s.pause_note or 'paused'}"


def _resume(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.ResumeScheduleRequest(project_id=args.project, schedule_id=args.schedule_id)
    s = stub.ResumeSchedule(ask, timeout=client.timeout)
    return s, f"{s.schedule_id}  resumed; next fire {next_text(s)}"


def _fire(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.FireScheduleRequest(project_id=args.project, schedule_id=args.schedule_id)
    response = stub.FireSchedule(ask, timeout=client.timeout)
    return response, fired_text(response)


def _backfill(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.BackfillScheduleRequest(
        project_id=args.project,
        schedule_id=args.schedule_id,
        start_time=parse_time("--from", args.start),
        end_time=parse_time("--to", args.end),
        overlap_policy=OVERLAPS[args.overlap] if args.overlap else pb.OVERLAP_POLICY_UNSPECIFIED,
    )
    response = stub.BackfillSchedule(ask, timeout=client.timeout)
    old = sum(1 for r in response.runs if r.existing)
    total = f"{len(response.runs)} run(s): {len(response.runs) - old} new, {old} existing"
    return response, f"{fired_text(response)}\n{total}"


def _rm(stub: Stub, client: Client, args: argparse.Namespace) -> Shown:
    ask = pb.DeleteScheduleRequest(project_id=args.project, schedule_id=args.schedule_id)
    response = stub.DeleteSchedule(ask, timeout=client.timeout)
    return response, f"deleted schedule {args.schedule_id} (its runs and events stay)"


_COMMANDS: dict[str, Callable[[Stub, Client, argparse.Namespace], Shown]] = {
    "create": _create,
    "ls": _ls,
    "show": _show,
    "pause": _pause,
    "resume": _resume,
    "fire": _fire,
    "backfill": _backfill,
    "rm": _rm,
    "rotate-secret": _rotate,
}
