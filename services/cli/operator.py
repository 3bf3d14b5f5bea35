"""The operator's audited commands: `truerun resolve | fail | pause | resume | requeue`.

Each must say why (--reason); the operator is the API token's name (an operator token,
`--token` / TRUERUN_API_TOKEN), never something the command line asserts. Both are written
into the run's events. ``-o json|yaml`` prints ``{"run": ...}`` after the change. See
docs/state-model.md "Operator commands".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from truerun.v1 import run_service_pb2

from services.cli.client import Client, run_line
from services.cli.output import emit

_RESOLUTIONS = {
    "succeeded": run_service_pb2.RESOLUTION_SUCCEEDED,
    "failed": run_service_pb2.RESOLUTION_FAILED,
    "not-started": run_service_pb2.RESOLUTION_NOT_STARTED,
}


def add_parsers(client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Add the commands; ``client`` makes a subcommand parser with --server."""
    for name, help_text in (
        ("resolve", "settle an unknown or lost attempt: --as succeeded|failed|not-started"),
        ("fail", "fail a run that never started (queued, paused or dead-lettered)"),
        ("pause", "take a queued run out of the queue (never claimed until resumed)"),
        ("resume", "put a paused run back in the queue"),
        ("requeue", "put a dead-lettered run back in the queue"),
    ):
        parser = client(name, help_text + " (audited)")
        parser.add_argument("run_id", help="the run's id")
        parser.add_argument("--reason", required=True, help="why; recorded in the run's events")
        if name == "resolve":
            parser.add_argument(
                "--as",
                dest="resolution",
                required=True,
                choices=_RESOLUTIONS,
                help="what truerun is told happened: succeeded, failed or not-started",
            )


def _resolve(client: Client, args: argparse.Namespace) -> int:
    run = client.stub.ResolveRun(
        run_service_pb2.ResolveRunRequest(
            id=args.run_id,
            reason=args.reason,
            resolution=_RESOLUTIONS[args.resolution],
        ),
        timeout=client.timeout,
    )
    emit(args.output, {"run": run}, run_line(run))
    return 0


def _simple(method: str, request_type: Any) -> Callable[[Client, argparse.Namespace], int]:
    def command(client: Client, args: argparse.Namespace) -> int:
        request = request_type(id=args.run_id, reason=args.reason)
        run = getattr(client.stub, method)(request, timeout=client.timeout)
        emit(args.output, {"run": run}, run_line(run))
        return 0

    return command


COMMANDS: dict[str, Callable[[Client, argparse.Namespace], int]] = {
    "resolve": _resolve,
    "fail": _simple("FailRun", run_service_pb2.FailRunRequest),
    "pause": _simple("PauseRun", run_service_pb2.PauseRunRequest),
    "resume": _simple("ResumeRun", run_service_pb2.ResumeRunRequest),
    "requeue": _simple("RequeueRun", run_service_pb2.RequeueRunRequest),
}
