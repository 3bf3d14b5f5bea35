"""Building runtime events (the seq is given by the outbox when the event is written)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from truerun.v1 import runtime_service_pb2 as pb

TERMINAL_TYPES = frozenset(
    {
        pb.RUNTIME_EVENT_TYPE_SUCCEEDED,
        pb.RUNTIME_EVENT_TYPE_FAILED,
        pb.RUNTIME_EVENT_TYPE_CANCELLED,
        pb.RUNTIME_EVENT_TYPE_TIMED_OUT,
    }
)


def make_event(
    attempt_id: str,
    runtime_task_id: str,
    callback_token: str,
    event_type: pb.RuntimeEventType.ValueType,
    *,
    turn_status: pb.TurnStatus.ValueType = pb.TURN_STATUS_UNSPECIFIED,
    exit_code: int | None = None,
    error_code: str = "",
    error_summary: str = "",
    payload: Mapping[str, Any] | None = None,
    trace_parent: str = "",
) -> pb.RuntimeEvent:
    """A RuntimeEvent stamped with the runtime's clock; seq stays 0 until ``Outbox.append``.
    ``trace_parent`` is the Start's, echoed so the server can trace the attempt's events."""
    event = pb.RuntimeEvent(
        attempt_id=attempt_id,
        runtime_task_id=runtime_task_id,
        callback_token=callback_token,
        type=event_type,
        turn_status=turn_status,
        error_code=error_code,
        error_summary=error_summary,
        trace_parent=trace_parent,
    )
    if exit_code is not None:
        event.exit_code = exit_code
    if payload:
        event.payload.update(dict(payload))
    event.event_time.GetCurrentTime()
    return event
