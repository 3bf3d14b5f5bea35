"""Continuations over the API (docs/long-tasks.md "Continuations and catch-up"): a
``ContinuationSpec`` checked and turned into the domain's ``Continuation`` (refused with
INVALID_CONTINUATION, the field named, nothing written), and a stored continuation shown as
``LongTaskContinuation``."""

from __future__ import annotations

from typing import Any

from google.protobuf import duration_pb2
from truerun.v1 import long_task_service_pb2 as pb

from coordinator.api.convert import timestamp
from kernel.errors import InvalidContinuation
from longtasks.domain.continuations import (
    DEFAULT_CATCHUP_WINDOW_MS,
    Continuation,
    ContinuationKind,
    spec_refusal,
    waiting_text,
)


def continuation_from_proto(spec: pb.ContinuationSpec, task_id: str, now_ms: int) -> Continuation:
    """The continuation asked for; exactly one of ``at``, ``cron`` and ``every``."""
    given = [spec.HasField("at"), bool(spec.cron.strip()), spec.HasField("every")]
    if sum(given) != 1:
        raise InvalidContinuation("continuation needs exactly one of at, cron and every")
    catchup = DEFAULT_CATCHUP_WINDOW_MS
    if spec.HasField("catchup_window"):
        catchup = spec.catchup_window.ToMilliseconds()
    if len(spec.reason) > 1024:
        raise InvalidContinuation("reason is longer than 1024 characters")
    asked = Continuation(
        task_id=task_id,
        kind=ContinuationKind.AT if spec.HasField("at") else ContinuationKind.WINDOW,
        expected_version=0,  # the door sets the version its own change makes
        due_ms=spec.at.ToMilliseconds() if spec.HasField("at") else None,
        time_zone=spec.time_zone.strip() or "UTC",
        cron=spec.cron.strip() or None,
        every_ms=spec.every.ToMilliseconds() if spec.HasField("every") else None,
        catchup_window_ms=catchup,
        reason=spec.reason,
    )
    refused = spec_refusal(asked, now_ms)
    if refused is not None:
        raise InvalidContinuation(refused)
    return asked


def continuation_to_proto(c: Continuation, state_version: int) -> pb.LongTaskContinuation:
    """A task's continuation as shown, for the task at ``state_version``."""
    waiting = c.holds(state_version)
    return pb.LongTaskContinuation(
        kind=c.kind.value,
        due_time=_ts(c.due_ms if c.fired_at_ms is None else None),
        time_zone=c.time_zone,
        cron=c.cron or "",
        every=_duration(c.every_ms),
        catchup_window=_duration(c.catchup_window_ms),
        waiting=waiting,
        label=waiting_text(c, c.due_ms) if waiting else "",
        missed_total=c.missed_total,
        note=c.note,
        fire_time=_ts(c.fired_at_ms),
        reason=c.reason,
        requested_by=c.requested_by,
    )


def _ts(ms: int | None) -> Any:
    return None if ms is None else timestamp(ms)


def _duration(ms: int | None) -> duration_pb2.Duration | None:
    if ms is None:
        return None
    value = duration_pb2.Duration()
    value.FromMilliseconds(ms)
    return value
