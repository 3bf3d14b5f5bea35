"""`truerun ls`: runs, newest first, filtered by project, owner, agent, task, state, time
and text.

Every filter is ListRuns' own (``--state``: display states; ``--since``/``--until``: the
creation time range; ``--text``: a case-insensitive substring of id, task, owner, agent,
trigger or error code). ``--since`` is also checked here, so a server that ignores the
range still lists only newer runs (newest first: the first older one ends the listing).
Text has a header and, when the limit cut the listing short, a ``more`` hint on stderr
(stdout stays the rows); ``-o json|yaml`` prints ``{"runs": [...], "more": bool}``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime

from google.protobuf import json_format, timestamp_pb2
from truerun.v1 import common_pb2, run_service_pb2

from services.cli.client import Client, duration, run_line
from services.cli.output import print_data
from services.cli.run_times import run_span

STATES = [
    name.removeprefix("DISPLAY_STATE_").lower()
    for name in common_pb2.DisplayState.keys()
    if name != "DISPLAY_STATE_UNSPECIFIED"
]
_AGO = re.compile(r"^(\d+)\s*(s|m|min|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
HEADER = f"{'RUN':<36}  {'TASK':<20}  STATE"


def since_type(now: Callable[[], float] = time.time) -> Callable[[str], float]:
    """An argparse ``type`` for ``--since``: an age (90s, 10m, 2h, 3d) or an ISO 8601 time
    (2026-12-01T09:00, local time unless it names a zone); the epoch seconds it means."""

    def parse(text: str) -> float:
        ago = _AGO.match(text.strip())
        if ago:
            return now() - int(ago.group(1)) * _UNIT_S[ago.group(2)]
        try:
            return datetime.fromisoformat(text.strip()).timestamp()
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither an age (90s, 10m, 2h, 3d) nor an ISO 8601 time"
            ) from None

    parse.__name__ = "an age or a time"
    return parse


def add_parser(ls: argparse.ArgumentParser) -> None:
    """The filters and the output choice (the limit and --server are added by the caller)."""
    ls.add_argument("--project", default="", help="only this project's runs")
    ls.add_argument("--owner", default="", help="only this owner's runs")
    ls.add_argument("--agent", default="", help="only this agent's runs")
    ls.add_argument("--task", default="", help="only this task's runs")
    ls.add_argument(
        "--text",
        default="",
        help="only runs whose id, task, owner, agent, trigger or error code contains it",
    )
    ls.add_argument(
        "--state",
        action="append",
        choices=STATES,
        default=[],
        metavar="STATE",
        help=f"only runs in this display state; repeat for several ({', '.join(STATES)})",
    )
    ls.add_argument(
        "--since",
        type=since_type(),
        default=None,
        help="only runs created since: an age (90s, 10m, 2h, 3d) or an ISO 8601 time",
    )
    ls.add_argument(
        "--until",
        type=since_type(),
        default=None,
        help="only runs created before: an age (90s, 10m, 2h, 3d) or an ISO 8601 time",
    )


def created_s(run: common_pb2.Run) -> float:
    return float(run.create_time.ToMilliseconds()) / 1000


def age_text(run: common_pb2.Run, now_s: float) -> str:
    """``created 14:32:05 (3 min ago)``; '' when the server did not say."""
    if not run.HasField("create_time"):
        return ""
    at = created_s(run)
    clock = datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")
    return f"created {clock} ({duration(max(0.0, now_s - at))} ago)"


def _at(seconds: float | None) -> timestamp_pb2.Timestamp | None:
    if seconds is None:
        return None
    at = timestamp_pb2.Timestamp()
    at.FromMilliseconds(int(seconds * 1000))
    return at


def listed(client: Client, args: argparse.Namespace) -> tuple[list[common_pb2.Run], bool]:
    """Up to ``--limit`` runs that pass the filters, and whether there are more."""
    states = [common_pb2.DisplayState.Value(f"DISPLAY_STATE_{s.upper()}") for s in args.state]
    runs: list[common_pb2.Run] = []
    token = ""
    while True:
        page = client.stub.ListRuns(
            run_service_pb2.ListRunsRequest(
                project_id=args.project,
                owner_id=args.owner,
                agent_id=args.agent,
                task_id=args.task,
                text=args.text,
                display_states=states,
                create_time_from=_at(args.since),
                create_time_to=_at(args.until),
                page_size=min(args.limit - len(runs) + 1, 500),
                page_token=token,
            ),
            timeout=client.timeout,
        )
        for run in page.runs:
            if args.since is not None and created_s(run) < args.since:
                return runs, False  # newest first: every later run is older still
            if len(runs) == args.limit:
                return runs, True
            runs.append(run)
        token = page.next_page_token
        if not token:
            return runs, False


def ls(client: Client, args: argparse.Namespace) -> int:
    runs, more = listed(client, args)
    if args.output != "text":
        runs_data = [json_format.MessageToDict(run) for run in runs]
        print_data({"runs": runs_data, "more": more}, args.output)
        return 0
    now = time.time()
    print(HEADER)
    for run in runs:
        times = [t for t in (age_text(run, now), run_span(run, now)) if t]
        print("  ".join([run_line(run), *times]))
    if more:
        print(
            f"more: {len(runs)} shown; --limit {len(runs) * 2} or a filter "
            "(--state, --owner, --task, --text, --since) to see others",
            file=sys.stderr,
        )
    return 0
