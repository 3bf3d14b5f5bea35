"""Client commands: talk to a running truerun over gRPC and print what a person can read."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import grpc
from google.protobuf import json_format
from truerun.v1 import (
    common_pb2,
    long_task_service_pb2_grpc,
    run_service_pb2,
    run_service_pb2_grpc,
    schedule_service_pb2_grpc,
)

from coordinator.api.bearer import with_bearer
from coordinator.api.errors import reason_of
from kernel.tls import TlsFiles, sync_channel
from services.cli.errors import say


def _enum_name(enum: Any, number: int, prefix: str) -> str:
    return str(enum.Name(number)).removeprefix(prefix).lower()


def display(run: common_pb2.Run) -> str:
    return _enum_name(common_pb2.DisplayState, run.display_state, "DISPLAY_STATE_")


def since(run: common_pb2.Run, now_s: float | None = None) -> str:
    """``since 14:32:05 (3 min)``: when the display state began (local time) and how long
    it holds; '' when the server did not say."""
    if not run.HasField("display_since_time"):
        return ""
    at = run.display_since_time.ToMilliseconds() / 1000
    held = max(0.0, (time.time() if now_s is None else now_s) - at)
    clock = datetime.fromtimestamp(at).strftime("%H:%M:%S")
    return f"since {clock} ({duration(held)})"


def duration(seconds: float) -> str:
    """42s, 2m 05s, 2h 05m, 3d 04h: two units at most, the second zero-padded so columns
    line up, rounded down."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def run_line(run: common_pb2.Run) -> str:
    state = display(run)
    extra = ""
    if state == "queued" and run.queue_position:
        extra = f" (position {run.queue_position})"
    elif state in ("unknown", "cancelling", "waiting_runtime", "starting"):
        extra = f" ({run.display_reason})"
    held = since(run)
    return f"{run.id}  {run.task_id:<20}  {state}{extra}" + (f"  {held}" if held else "")


def show_run(
    run: common_pb2.Run, events: Sequence[common_pb2.RunEvent], times: Sequence[str] = ()
) -> str:
    """`truerun show`; ``times``: the created/started/ended and attempts lines
    (services/cli/run_times.py), shown before the events."""
    lines = [
        f"run        {run.id}",
        f"task       {run.task_id}   project {run.project_id}   owner {run.owner_id}",
        f"state      {display(run)} {since(run)}   ({run.display_reason})",
        f"status     {_enum_name(common_pb2.RunStatus, run.status, 'RUN_STATUS_')}"
        f"   version {run.version}   attempts {run.attempt_count}",
    ]
    if run.retry_of_run_id:
        lines.append(f"retry of   {run.retry_of_run_id}")
    if run.HasField("approval"):
        lines.extend(approval_lines(run.approval))
    if run.HasField("current_attempt"):
        a = run.current_attempt
        lines.append(
            f"attempt    #{a.attempt_no} {a.id}  control "
            f"{_enum_name(common_pb2.AttemptStatus, a.status, 'ATTEMPT_STATUS_')}  observed "
            f"{_enum_name(common_pb2.ObservedState, a.observed_state, 'OBSERVED_STATE_')}  sync "
            f"{_enum_name(common_pb2.SyncState, a.sync_state, 'SYNC_STATE_')}"
        )
    if run.error_code:
        summary = f": {run.error_summary}" if run.error_summary else ""
        lines.append(f"error      {run.error_code}{summary}")
    lines.extend(times)
    lines.append("events")
    lines.extend(event_line(e) for e in events)
    return "\n".join(lines)


def _local(stamp: Any) -> str:
    return datetime.fromtimestamp(stamp.ToMilliseconds() / 1000).strftime("%Y-%m-%d %H:%M:%S")


def approval_lines(approval: common_pb2.RunApproval) -> list[str]:
    """`truerun show`'s approval: what it requires, until when, and who approved when."""
    policy = approval.policy
    count = policy.required_approvals or 1
    needs = f"{count} approver{'s' if count != 1 else ''}"
    if policy.approver_groups:
        needs += f" of {', '.join(policy.approver_groups)}"
    if policy.refuse_self_approval:
        needs += ", not its creator"
    if approval.HasField("expire_time"):
        needs += f", closes {_local(approval.expire_time)}"
    left = f"{approval.remaining} more needed" if approval.remaining else "approved"
    lines = [f"approval   {needs}   ({left})"]
    for i, grant in enumerate(approval.grants):
        groups = f" ({', '.join(grant.groups)})" if grant.groups else ""
        head = "granted by" if i == 0 else "          "
        lines.append(f"{head} {grant.approver}{groups} at {_local(grant.grant_time)}")
    return lines


def event_line(event: common_pb2.RunEvent) -> str:
    actor = _enum_name(common_pb2.ActorType, event.actor.type, "ACTOR_TYPE_")
    payload = {
        k: int(v) if isinstance(v, float) and v.is_integer() else v
        for k, v in json_format.MessageToDict(event.payload).items()
    }
    detail = f"  {json.dumps(payload, sort_keys=True)}" if payload else ""
    return f"  {event.sequence:>4}  {event.type:<32} by {actor}:{event.actor.id}{detail}"


def tls_from_env(environ: Mapping[str, str]) -> TlsFiles:
    """The client commands' TLS files: TRUERUN_TLS_CA_FILE, TRUERUN_TLS_CLIENT_CERT_FILE and
    TRUERUN_TLS_CLIENT_KEY_FILE, read from the environment as TRUERUN_SERVER is."""
    return TlsFiles(
        environ.get("TRUERUN_TLS_CA_FILE", ""),
        environ.get("TRUERUN_TLS_CLIENT_CERT_FILE", ""),
        environ.get("TRUERUN_TLS_CLIENT_KEY_FILE", ""),
    )


class Client:
    def __init__(
        self, address: str, timeout: float = 10.0, token: str = "", tls: TlsFiles | None = None
    ) -> None:
        # TLS when the address is https://... or ``tls`` names files (kernel/tls.py)
        self._raw = sync_channel(
            address,
            tls or TlsFiles(),
            options=[("grpc.keepalive_time_ms", 20_000), ("grpc.keepalive_timeout_ms", 10_000)],
        )
        self._channel = with_bearer(self._raw, token)
        self.stub = run_service_pb2_grpc.RunServiceStub(self._channel)
        self.schedules = schedule_service_pb2_grpc.ScheduleServiceStub(self._channel)
        self.long_tasks = long_task_service_pb2_grpc.LongTaskServiceStub(self._channel)
        self.timeout = timeout

    def close(self) -> None:
        self._raw.close()

    def events(self, run_id: str) -> list[common_pb2.RunEvent]:
        events: list[common_pb2.RunEvent] = []
        token = ""
        while True:
            page = self.stub.ListRunEvents(
                run_service_pb2.ListRunEventsRequest(run_id=run_id, page_token=token),
                timeout=self.timeout,
            )
            events.extend(page.events)
            token = page.next_page_token
            if not token:
                return events


def fail(error: grpc.RpcError) -> int:
    """What the server said (or that none answered) in one line; exit status 2."""
    reason = reason_of(error)
    code_fn = getattr(error, "code", None)
    details_fn = getattr(error, "details", None)
    code = code_fn().name if code_fn else "UNKNOWN"
    details = details_fn() if details_fn else str(error)
    return say(str(details), f"{code}{' ' + reason if reason else ''}")
