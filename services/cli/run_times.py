"""When a run and each of its attempts was created, claimed, started and ended, and how long
each stretch took (``2m 05s``), for `truerun show` and `truerun ls`. Pure: messages and the
time now in, text out; times in this machine's local time. A time the server did not record
is left out, never guessed (a queued run has no start; an attempt lost with its runtime has
no end until truerun settles it)."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import timestamp_pb2
from truerun.v1 import common_pb2

from services.cli.client import duration
from services.cli.schedule_view import local


def _s(stamp: timestamp_pb2.Timestamp) -> float:
    return float(stamp.ToMilliseconds()) / 1000


def _set(message: common_pb2.Run | common_pb2.Attempt, name: str) -> bool:
    return bool(message.HasField(name))  # type: ignore[arg-type]


def run_span(run: common_pb2.Run, now_s: float) -> str:
    """``ran 2m 05s`` (ended), ``running for 40s`` (started, not ended), else ''."""
    if not run.HasField("start_time"):
        return ""
    if run.HasField("finish_time"):
        return f"ran {duration(_s(run.finish_time) - _s(run.start_time))}"
    return f"running for {duration(now_s - _s(run.start_time))}"


def run_time_lines(run: common_pb2.Run, now_s: float) -> list[str]:
    """``created``, ``started`` and ``ended`` lines, each with the stretch before it."""
    lines: list[str] = []
    if run.HasField("create_time"):
        lines.append(f"created    {local(run.create_time, exact=False)}")
    if run.HasField("start_time"):
        waited = ""
        if run.HasField("create_time"):
            waited = f"   (waited {duration(_s(run.start_time) - _s(run.create_time))})"
        lines.append(f"started    {local(run.start_time, exact=False)}{waited}")
    if run.HasField("finish_time"):
        ran = f"   ({run_span(run, now_s)})" if run.HasField("start_time") else ""
        lines.append(f"ended      {local(run.finish_time, exact=False)}{ran}")
    elif run.HasField("start_time"):
        lines.append(f"ended      not yet   ({run_span(run, now_s)})")
    return lines


#: An attempt's moments in the order they happen, each with its name as shown.
_MOMENTS = (
    ("claim_time", "claimed"),
    ("start_request_time", "start sent"),
    ("start_time", "started"),
    ("finish_time", "ended"),
)


def attempt_line(attempt: common_pb2.Attempt, now_s: float) -> str:
    """``#1 ID  claimed 14:32:05  start sent +0s  started +1s  ended +2m 05s  (took 2m 06s)``:
    the first moment as a time, each later one as the stretch since the one before."""
    parts: list[str] = []
    first: float | None = None
    last: float | None = None
    for field, name in _MOMENTS:
        if not _set(attempt, field):
            continue
        at = _s(getattr(attempt, field))
        if last is None:
            parts.append(f"{name} {local(getattr(attempt, field), exact=False)}")
            first = at
        else:
            parts.append(f"{name} +{duration(at - last)}")
        last = at
    if first is not None and _set(attempt, "finish_time"):
        parts.append(f"(took {duration(_s(attempt.finish_time) - first)})")
    elif first is not None:
        parts.append(f"(for {duration(now_s - first)} so far)")
    exit_code = f"  exit {attempt.exit_code}" if attempt.HasField("exit_code") else ""
    status = common_pb2.AttemptStatus.Name(attempt.status).removeprefix("ATTEMPT_STATUS_")
    head = f"  #{attempt.attempt_no} {attempt.id}  {status.lower()}{exit_code}"
    return f"{head}  " + "  ".join(parts) if parts else head


def attempt_lines(attempts: Sequence[common_pb2.Attempt], now_s: float) -> list[str]:
    if not attempts:
        return ["attempts   (none yet)"]
    return ["attempts", *(attempt_line(a, now_s) for a in attempts)]
