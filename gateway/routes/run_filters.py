"""The runs list's query parameters (``GET .../runs`` and ``GET .../runs:count``), read once
for both so that the counts beside a list are always the counts of that list's filter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf import timestamp_pb2
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import common_pb2, run_service_pb2

from gateway import messages
from gateway.http import json_response
from gateway.problems import Problem
from gateway.routes.common import CALL_TIMEOUT_S, context, endpoint, principal

R = run_service_pb2
Filtered = R.ListRunsRequest | R.CountRunsRequest
_FIRST = datetime(1, 1, 1, tzinfo=UTC)
_LAST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def fill(message: Filtered, project: str, query: QueryParams) -> None:
    """Sets ``message``'s filters from the query; 400 for a value that cannot be one."""
    message.project_id = project
    message.owner_id = query.get("owner_id", "")
    message.agent_id = query.get("agent_id", "")
    message.task_id = query.get("task_id", "")
    message.text = query.get("text", "")
    message.statuses.extend(
        enum_params(query.getlist("status"), common_pb2.RunStatus, "RUN_STATUS")
    )
    for name in ("create_time_from", "create_time_to"):
        raw = query.get(name, "").strip()
        if raw:
            getattr(message, name).CopyFrom(_timestamp(raw, name))


def enum_params(raw: list[str], enum: Any, prefix: str) -> list[Any]:
    """``status=queued,running`` or ``status=RUN_STATUS_QUEUED&status=...``."""
    values: list[Any] = []
    for item in (part.strip() for value in raw for part in value.split(",")):
        if not item:
            continue
        name = item.upper() if item.upper().startswith(prefix + "_") else f"{prefix}_{item.upper()}"
        try:
            values.append(int(enum.Value(name)))
        except ValueError:
            raise Problem(400, "INVALID_ARGUMENT", f"unknown {prefix.lower()}: {item}") from None
    return values


def _timestamp(raw: str, name: str) -> timestamp_pb2.Timestamp:
    example = "e.g. 2026-01-02T03:04:05Z"
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise Problem(
            400, "INVALID_ARGUMENT", f"{name} must be an RFC 3339 time, {example}"
        ) from None
    if moment.tzinfo is None:
        raise Problem(400, "INVALID_ARGUMENT", f"{name} needs a time zone (Z or +hh:mm)")
    # A Timestamp holds 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z (UTC):
    # 0001-01-01T00:00:00+03:04 is a valid RFC 3339 time before it, and converting it
    # overflows (issue 37: it was a text/plain 500).
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not _FIRST <= utc <= _LAST:
        raise Problem(
            400,
            "INVALID_ARGUMENT",
            f"{name} must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z",
        )
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(utc)
    return stamp


@endpoint
async def count_runs(request: Request) -> Response:
    who = principal(request)
    project = request.path_params["project"]
    counting = R.CountRunsRequest()
    fill(counting, project, request.query_params)
    if not who.sees(project):
        # Like the list: a project the token does not see is empty, not an error.
        return json_response(messages.to_dict(R.CountRunsResponse(complete=True)))
    answer = await context(request).runs.CountRuns(counting, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer))
