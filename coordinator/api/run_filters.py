"""The filters of ListRuns and CountRuns, from their request messages to the store's
RunFilter: one reading for both, so a count always describes the list it stands beside."""

from __future__ import annotations

from typing import Literal

from truerun.v1 import run_service_pb2

from coordinator.api import convert, validation
from coordinator.api.auth import caller
from coordinator.domain.states import DisplayState, RunStatus
from coordinator.store.base import RunFilter
from kernel.errors import InvalidArgument, PermissionDenied

Filtered = run_service_pb2.ListRunsRequest | run_service_pb2.CountRunsRequest
MAX_FILTER_TEXT = 256  # the longest identifying column (task_id, trigger_id)


def run_filter(request: Filtered) -> RunFilter:
    """The store filter a request asks for; INVALID_ARGUMENT for a bad value,
    PERMISSION_DENIED for a project the caller's token does not see."""
    try:
        statuses = frozenset(
            s
            for n in request.statuses
            if (s := convert.enum_from_proto(RunStatus, "RUN_STATUS", n)) is not None
        )
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    project_id = validation.name(request.project_id, "project_id", required=False)
    if project_id is not None:
        if not caller().sees(project_id):
            raise PermissionDenied(f"this token does not see project {project_id}")
    elif not caller().all_projects:
        raise InvalidArgument("project_id is required: this token sees only some projects")
    created_from = _ms(request, "create_time_from")
    created_to = _ms(request, "create_time_to")
    if created_from is not None and created_to is not None and created_to <= created_from:
        raise InvalidArgument("create_time_to must be after create_time_from")
    text = request.text.strip()
    if len(text) > MAX_FILTER_TEXT or not text.isprintable():
        raise InvalidArgument(f"text must be at most {MAX_FILTER_TEXT} printable characters")
    task_id = request.task_id.strip()
    if len(task_id) > MAX_FILTER_TEXT or not task_id.isprintable():
        raise InvalidArgument(f"task_id must be at most {MAX_FILTER_TEXT} printable characters")
    return RunFilter(
        project_id=project_id,
        owner_id=validation.name(request.owner_id, "owner_id", required=False),
        agent_id=validation.name(request.agent_id, "agent_id", required=False),
        statuses=statuses,
        task_id=task_id or None,
        created_from_ms=created_from,
        created_to_ms=created_to,
        text=text.lower() or None,
    )


def display_states(request: run_service_pb2.ListRunsRequest) -> frozenset[DisplayState]:
    try:
        return frozenset(
            d
            for n in request.display_states
            if (d := convert.enum_from_proto(DisplayState, "DISPLAY_STATE", n)) is not None
        )
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def _ms(request: Filtered, field: Literal["create_time_from", "create_time_to"]) -> int | None:
    if not request.HasField(field):
        return None
    stamp = getattr(request, field)
    if stamp.seconds < 0:
        raise InvalidArgument(f"{field} must not be before 1970")
    return int(stamp.ToMilliseconds())
