"""A declared continuation (``{"continue": {...}}``, a step of the step driver's plan): when
the step is reached the attempt asks truerun for its next attempt later (``ContinueLater``)
and ends; the attempt the continuation starts completes the step and goes on with the rest
(docs/long-tasks.md "Continuations and catch-up", section 10).

``{"continue": {"at": "2026-12-02T09:00" | ms since epoch, "cron": "0 9 * * 1-5",
"every": "1h", "zone": "Europe/Berlin", "catchup": "15m", "reason": "..."}}``: exactly one
of ``at``, ``cron``, ``every``; durations are ``<number><ms|s|m|h|d>``; a naive ``at`` is read
in ``zone`` (default UTC). truerun checks the rest (a window that never opens, a catch-up
window out of range) and refuses with INVALID_CONTINUATION.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from google.protobuf import duration_pb2, timestamp_pb2
from truerun.v1 import long_task_service_pb2 as pb

#: how the attempt's ContinueLater reason names the step it waits for; the next attempt's
#: briefing shows it as the previous attempt's reason ("continues later: <this>")
WAITS_FOR = "step {step_id} waits for its continuation"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_KEYS = {"at", "cron", "every", "zone", "catchup", "reason"}


class ContinueError(ValueError):
    """The declared continuation cannot be asked for as written."""


def duration_ms(text: Any, name: str) -> int:
    """``"90s"`` -> 90000; an error names the key."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise ContinueError(f'{name} must be a duration like "30s", "15m", "1h", not {text!r}')
    value = int(float(match.group(1)) * _UNIT_MS[match.group(2)])
    if value <= 0:
        raise ContinueError(f"{name} must be longer than 0")
    return value


def parse_continue(spec: Any) -> pb.ContinuationSpec:
    """The ContinuationSpec a declared ``continue`` asks for (without its reason's step)."""
    if not isinstance(spec, dict) or not spec:
        raise ContinueError('continue must be an object: {"at" | "cron" | "every": ...}')
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise ContinueError(f"continue has unknown keys: {', '.join(unknown)}")
    given = [k for k in ("at", "cron", "every") if spec.get(k) not in (None, "")]
    if len(given) != 1:
        raise ContinueError("continue needs exactly one of at, cron, every")
    zone = spec.get("zone", "") or ""
    reason = spec.get("reason", "") or ""
    if not isinstance(zone, str) or not isinstance(reason, str):
        raise ContinueError("zone and reason must be strings")
    out = pb.ContinuationSpec(time_zone=zone, reason=reason)
    if given == ["at"]:
        out.at.CopyFrom(_instant(spec["at"], zone))
    elif given == ["cron"]:
        if not isinstance(spec["cron"], str):
            raise ContinueError("cron must be a string")
        out.cron = spec["cron"]
    else:
        out.every.CopyFrom(_duration(duration_ms(spec["every"], "every")))
    if spec.get("catchup") not in (None, ""):
        out.catchup_window.CopyFrom(_duration(duration_ms(spec["catchup"], "catchup")))
    return out


def _instant(value: Any, zone: str) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        stamp.FromMilliseconds(value)
        return stamp
    if not isinstance(value, str):
        raise ContinueError("at must be an ISO 8601 time or milliseconds since the epoch")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ContinueError(f"at is not an ISO 8601 time: {value!r}") from None
    if when.tzinfo is None:
        try:
            when = when.replace(tzinfo=ZoneInfo(zone) if zone else UTC)
        except (ZoneInfoNotFoundError, ValueError):
            raise ContinueError(f"zone is not an IANA time zone: {zone!r}") from None
    stamp.FromMilliseconds(int(when.timestamp() * 1000))
    return stamp


def _duration(ms: int) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromMilliseconds(ms)
    return value
