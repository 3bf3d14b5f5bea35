"""Schedules (ScheduleService): create, list, get, change (a JSON merge patch, conditional on
the etag), delete, pause, resume, fire, backfill, the upcoming fire times, the events, and the
runs the schedule's fires created, and rotating its webhook secret. Deliveries, the one
route without a bearer token, are in gateway/routes/webhooks.py."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import common_pb2, run_service_pb2
from truerun.v1 import schedule_service_pb2 as pb

from gateway import messages
from gateway.http import int_param, json_response
from gateway.problems import Problem, code_of
from gateway.routes.common import (
    CALL_TIMEOUT_S,
    body_of,
    context,
    endpoint,
    principal,
)
from gateway.tokens import Principal

#: Runs per page of ``GET .../schedules/{schedule}/runs`` (default and most).
RUNS_PAGE = 20
MAX_RUNS_PAGE = 100
#: Event pages one runs page reads at most (it may then hold fewer runs, and a next token).
_EVENT_READS = 10
_IMMUTABLE = ("project_id", "schedule_id")


def _not_found(project: str, schedule: str) -> Problem:
    # Word for word what ScheduleService says, so a schedule of a project the token does
    # not see answers exactly like a missing one.
    return Problem(
        404, "SCHEDULE_NOT_FOUND", f"schedule {schedule} does not exist in project {project}"
    )


def _named(request: Request, who: Principal) -> tuple[str, str]:
    """The path's project and schedule; another project's schedule is a missing one."""
    project = request.path_params["project"]
    schedule = request.path_params["schedule"]
    if not who.sees(project):
        raise _not_found(project, schedule)
    return project, schedule


def _schedule_path(schedule: pb.Schedule) -> str:
    return f"/v1/projects/{schedule.project_id}/schedules/{schedule.schedule_id}"


def _schedule_response(schedule: pb.Schedule, status: int = 200) -> Response:
    return json_response(messages.to_dict(schedule), status, {"ETag": schedule.etag})


def _fields(document: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(document) - allowed)
    if unknown:
        raise Problem(400, "INVALID_ARGUMENT", f"unknown body fields: {', '.join(unknown)}")


def _string(document: dict[str, Any], name: str) -> str:
    value = document.get(name, "")
    if not isinstance(value, str):
        raise Problem(400, "INVALID_ARGUMENT", f"{name} must be a string")
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: objects merge member by member, null removes a member, anything else
    replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


# -- reads -----------------------------------------------------------------------------


@endpoint
async def list_all_schedules(request: Request) -> Response:
    """Every project the token sees (the services decide which)."""
    principal(request)
    return await _list(request, "")


@endpoint
async def list_schedules(request: Request) -> Response:
    who = principal(request)
    project = request.path_params["project"]
    if not who.sees(project):
        int_param(request.query_params.get("page_size"), "page_size")  # still checked
        return json_response(messages.to_dict(pb.ListSchedulesResponse()))
    return await _list(request, project)


async def _list(request: Request, project: str) -> Response:
    query = request.query_params
    listing = pb.ListSchedulesRequest(
        project_id=project,
        page_size=int_param(query.get("page_size"), "page_size"),
        page_token=query.get("page_token", ""),
    )
    answer = await context(request).schedules.ListSchedules(listing, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer))


@endpoint
async def get_schedule(request: Request) -> Response:
    project, schedule = _named(request, principal(request))
    found = await context(request).schedules.GetSchedule(
        pb.GetScheduleRequest(project_id=project, schedule_id=schedule), timeout=CALL_TIMEOUT_S
    )
    return _schedule_response(found)


@endpoint
async def list_upcoming(request: Request) -> Response:
    project, schedule = _named(request, principal(request))
    count = int_param(request.query_params.get("count"), "count")
    answer = await context(request).schedules.ListUpcomingFires(
        pb.ListUpcomingFiresRequest(project_id=project, schedule_id=schedule, count=count),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(answer))


@endpoint
async def list_events(request: Request) -> Response:
    project, schedule = _named(request, principal(request))
    query = request.query_params
    answer = await context(request).schedules.ListScheduleEvents(
        pb.ListScheduleEventsRequest(
            project_id=project,
            schedule_id=schedule,
            page_size=int_param(query.get("page_size"), "page_size"),
            page_token=query.get("page_token", ""),
        ),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(answer))


@endpoint
async def list_runs(request: Request) -> Response:
    """The runs the schedule's fires created, newest fire first: the ``fired`` events' runs,
    each read with GetRun (the state is the services' display state, as everywhere). A page
    is read from whole pages of events, so its token resumes exactly after them. A run
    fired again (the same request id or delivery, a backfill over fired times) is listed
    once per page, at its newest fire; a later page may list it again at an older one."""
    project, schedule = _named(request, principal(request))
    query = request.query_params
    size = min(int_param(query.get("page_size"), "page_size") or RUNS_PAGE, MAX_RUNS_PAGE)
    token = query.get("page_token", "")
    ctx = context(request)
    run_ids: list[str] = []
    for _ in range(_EVENT_READS):
        # At most as many events as runs still wanted: a page never holds more than size.
        page = await ctx.schedules.ListScheduleEvents(
            pb.ListScheduleEventsRequest(
                project_id=project,
                schedule_id=schedule,
                page_size=size - len(run_ids),
                page_token=token,
            ),
            timeout=CALL_TIMEOUT_S,
        )
        for event in page.events:
            # A fire that found its run already created names it again: shown once.
            if event.type == "fired" and event.run_id and event.run_id not in run_ids:
                run_ids.append(event.run_id)
        token = page.next_page_token
        if not token or len(run_ids) >= size:
            break

    async def read(run_id: str) -> common_pb2.Run | None:
        try:
            run: common_pb2.Run = await ctx.runs.GetRun(
                run_service_pb2.GetRunRequest(id=run_id), timeout=CALL_TIMEOUT_S
            )
        except grpc.RpcError as error:
            if code_of(error) == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return run if run.project_id == project else None

    runs = [run for run in await asyncio.gather(*map(read, run_ids)) if run is not None]
    return json_response(
        {"runs": [messages.to_dict(run) for run in runs], "next_page_token": token}
    )


# -- writes ----------------------------------------------------------------------------


@endpoint
async def create_schedule(request: Request) -> Response:
    """The body is a Schedule; its id is the body's schedule_id or ``?schedule_id=``."""
    who = principal(request)
    project = request.path_params["project"]
    if not who.sees(project):
        raise Problem(403, "PERMISSION_DENIED", f"this token may not act in {project}")
    document = await body_of(request)
    schedule = messages.from_dict(document, pb.Schedule())
    if schedule.project_id and schedule.project_id != project:
        raise Problem(400, "INVALID_ARGUMENT", "project_id differs from the path's project")
    named = request.query_params.get("schedule_id", "")
    if named and schedule.schedule_id and named != schedule.schedule_id:
        raise Problem(400, "INVALID_ARGUMENT", "?schedule_id= differs from the body's")
    schedule.schedule_id = schedule.schedule_id or named
    if not schedule.schedule_id:
        raise Problem(400, "INVALID_ARGUMENT", "schedule_id is required (body or query)")
    schedule.project_id = project
    answer = await context(request).schedules.CreateSchedule(
        pb.CreateScheduleRequest(schedule=schedule), timeout=CALL_TIMEOUT_S
    )
    return json_response(
        messages.to_dict(answer),
        201,
        {"ETag": answer.schedule.etag, "Location": _schedule_path(answer.schedule)},
    )


@endpoint
async def update_schedule(request: Request) -> Response:
    """A JSON merge patch (RFC 7396) of the schedule, on the etag the client read
    (``If-Match`` or the body's ``etag``; ``If-Match: *`` is no condition): the services
    compare it, so a stale one is 409 SCHEDULE_VERSION_CONFLICT."""
    project, schedule_id = _named(request, principal(request))
    patch = await body_of(request)
    for name in _IMMUTABLE:
        if name in patch and patch[name] != request.path_params[name.removesuffix("_id")]:
            raise Problem(400, "INVALID_ARGUMENT", f"{name} cannot change (see the path)")
    body_etag = _string(patch, "etag")
    patch.pop("etag", None)
    header = request.headers.get("if-match", "").strip()
    if header and body_etag and header != "*" and header != body_etag:
        raise Problem(400, "INVALID_ARGUMENT", "If-Match differs from the body's etag")
    etag = header or body_etag
    if not etag:
        raise Problem(
            400,
            "INVALID_ARGUMENT",
            "an etag is required: send the schedule's ETag as If-Match (or as etag)",
        )
    messages.from_dict(_without_nulls(patch), pb.Schedule())  # a bad body fails first
    schedules = context(request).schedules
    current = await schedules.GetSchedule(
        pb.GetScheduleRequest(project_id=project, schedule_id=schedule_id),
        timeout=CALL_TIMEOUT_S,
    )
    changed = messages.from_dict(merge_patch(messages.to_dict(current), patch), pb.Schedule())
    changed.project_id, changed.schedule_id = project, schedule_id
    changed.etag = current.etag if etag == "*" else etag
    updated = await schedules.UpdateSchedule(
        pb.UpdateScheduleRequest(schedule=changed), timeout=CALL_TIMEOUT_S
    )
    return _schedule_response(updated)


@endpoint
async def delete_schedule(request: Request) -> Response:
    project, schedule = _named(request, principal(request))
    etag = request.headers.get("if-match", "").strip()
    await context(request).schedules.DeleteSchedule(
        pb.DeleteScheduleRequest(
            project_id=project, schedule_id=schedule, etag="" if etag == "*" else etag
        ),
        timeout=CALL_TIMEOUT_S,
    )
    return Response(status_code=204)


@endpoint
async def pause_schedule(request: Request) -> Response:
    project, schedule = _named(request, principal(request))
    document = await body_of(request)
    _fields(document, {"note"})
    paused = await context(request).schedules.PauseSchedule(
        pb.PauseScheduleRequest(
            project_id=project, schedule_id=schedule, note=_string(document, "note").strip()
        ),
        timeout=CALL_TIMEOUT_S,
    )
    return _schedule_response(paused)


@endpoint
async def resume_schedule(request: Request) -> Response:
    project, schedule = _named(request, principal(request))
    _fields(await body_of(request), set())
    resumed = await context(request).schedules.ResumeSchedule(
        pb.ResumeScheduleRequest(project_id=project, schedule_id=schedule),
        timeout=CALL_TIMEOUT_S,
    )
    return _schedule_response(resumed)


@endpoint
async def fire_schedule(request: Request) -> Response:
    """One fire now; a repeated request id (body ``request_id`` or ``Idempotency-Key``)
    returns the run the first one created."""
    project, schedule = _named(request, principal(request))
    document = await body_of(request)
    _fields(document, {"request_id"})
    request_id = _string(document, "request_id")
    key = request.headers.get("idempotency-key")
    if key is not None:
        if request_id and request_id != key:
            raise Problem(400, "INVALID_ARGUMENT", "Idempotency-Key differs from request_id")
        request_id = key
    fired = await context(request).schedules.FireSchedule(
        pb.FireScheduleRequest(project_id=project, schedule_id=schedule, request_id=request_id),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(fired))


@endpoint
async def backfill_schedule(request: Request) -> Response:
    project, schedule = _named(request, principal(request))
    document = await body_of(request)
    _fields(document, {"start_time", "end_time", "overlap_policy"})
    backfill = messages.from_dict(document, pb.BackfillScheduleRequest())
    if not (backfill.HasField("start_time") and backfill.HasField("end_time")):
        raise Problem(400, "INVALID_ARGUMENT", "start_time and end_time are required")
    backfill.project_id, backfill.schedule_id = project, schedule
    fired = await context(request).schedules.BackfillSchedule(backfill, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(fired))


@endpoint
async def rotate_webhook_secret(request: Request) -> Response:
    """A new webhook secret, in this answer only; the old one stops verifying at once."""
    project, schedule = _named(request, principal(request))
    _fields(await body_of(request), set())
    rotated = await context(request).schedules.RotateWebhookSecret(
        pb.RotateWebhookSecretRequest(project_id=project, schedule_id=schedule),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(rotated))
