"""ScheduleService and WebhookService over gRPC. ScheduleService is behind the bearer-token
interceptor like every service (coordinator/api/auth.py); the caller must see the project,
and to change or fire a schedule act for its template's owner (docs/tenancy.md).
WebhookService is authenticated by the delivery's HMAC signature, checked before anything
else is read or said (automations/service/schedules.py ``deliver``)."""

from __future__ import annotations

from typing import Any

import grpc
from truerun.v1 import schedule_service_pb2 as pb
from truerun.v1 import schedule_service_pb2_grpc

from automations.api import convert as sc
from automations.service.schedules import Fired, Schedules
from coordinator.api import validation
from coordinator.api.auth import caller
from coordinator.api.authorization import allow, served
from coordinator.api.convert import timestamp
from coordinator.api.credentials import Principal
from coordinator.api.errors import unary
from coordinator.dispatch.tokens import RuntimeTokens
from kernel.auth_bound import SlidingBound, retry_after_seconds
from kernel.errors import (
    InvalidArgument,
    PermissionDenied,
    ScheduleNotFound,
    TooManyBadSignatures,
    WebhookSignatureInvalid,
)

Ctx = grpc.aio.ServicerContext[Any, Any]
MAX_PAGE = 200
MAX_UPCOMING = 100


def _actor(who: Principal) -> tuple[str, str]:
    return ("user" if who.named else "api_app", who.name)


def _seen(project_id: str, schedule_id: str) -> tuple[str, str]:
    """The caller may act on this project's schedules; to anyone else they do not exist."""
    project = validation.name(project_id, "project_id") or ""
    schedule = validation.name(schedule_id, "schedule_id") or ""
    if not caller().sees(project):
        raise ScheduleNotFound(
            f"schedule {schedule} does not exist in project {project}", schedule_id=schedule
        )
    return project, schedule


def _fired(fired: Fired) -> pb.FireResponse:
    return sc.fired_to_proto(fired.runs, fired.notes, fired.schedule)


class ScheduleServicer(schedule_service_pb2_grpc.ScheduleServiceServicer):
    def __init__(self, schedules: Schedules, bindings: RuntimeTokens | None = None) -> None:
        """``bindings``: the runtime tokens of this process; a schedule for an owner no
        runtime serves in the project is refused (OWNER_NOT_SERVED)."""
        self._schedules = schedules
        self._bindings = bindings

    async def _acting(self, project_id: str, schedule_id: str, rpc: str) -> tuple[str, str]:
        """The schedule, if the caller may change or fire it: of a project it sees (else
        missing) and acting for its template's owner (docs/tenancy.md)."""
        project, schedule = _seen(project_id, schedule_id)
        found = await self._schedules.get(project, schedule)
        allow(rpc, project, found.template.owner_id)
        return project, schedule

    @unary
    async def CreateSchedule(
        self, request: pb.CreateScheduleRequest, context: Ctx
    ) -> pb.CreateScheduleResponse:
        schedule = sc.schedule_from_proto(request.schedule)
        if not caller().sees(schedule.project_id):
            raise PermissionDenied(
                f"this token may not create schedules in project {schedule.project_id}"
            )
        allow("ScheduleService.CreateSchedule", schedule.project_id, schedule.template.owner_id)
        served(self._bindings, schedule.template.owner_id, schedule.project_id)
        created, secret = await self._schedules.create(schedule, _actor(caller()))
        return pb.CreateScheduleResponse(
            schedule=sc.schedule_to_proto(created), webhook_secret=secret
        )

    @unary
    async def GetSchedule(self, request: pb.GetScheduleRequest, context: Ctx) -> pb.Schedule:
        project, schedule = _seen(request.project_id, request.schedule_id)
        return sc.schedule_to_proto(await self._schedules.get(project, schedule))

    @unary
    async def ListSchedules(
        self, request: pb.ListSchedulesRequest, context: Ctx
    ) -> pb.ListSchedulesResponse:
        who = caller()
        size = validation.in_range(request.page_size or 50, "page_size", 1, MAX_PAGE)
        after = sc.after_token(request.page_token)
        projects: list[str] | None
        if request.project_id:
            project = validation.name(request.project_id, "project_id") or ""
            if not who.sees(project):
                raise PermissionDenied(f"this token may not list project {project}")
            projects = [project]
        else:
            projects = None if who.all_projects else sorted(who.projects)
        found = await self._schedules.list_schedules(projects, after, size + 1)
        page = found[:size]
        token = (
            sc.page_token(page[-1].project_id, page[-1].schedule_id) if len(found) > size else ""
        )
        return pb.ListSchedulesResponse(
            schedules=[sc.schedule_to_proto(s) for s in page], next_page_token=token
        )

    @unary
    async def UpdateSchedule(self, request: pb.UpdateScheduleRequest, context: Ctx) -> pb.Schedule:
        rpc = "ScheduleService.UpdateSchedule"
        await self._acting(request.schedule.project_id, request.schedule.schedule_id, rpc)
        changed = sc.schedule_from_proto(request.schedule)
        allow(rpc, changed.project_id, changed.template.owner_id)  # nor hand it to another
        served(self._bindings, changed.template.owner_id, changed.project_id)
        expected = validation.etag(request.schedule.etag)
        if expected is None:
            raise InvalidArgument("schedule.etag is required: read the schedule, then update it")
        updated = await self._schedules.update(changed, expected, _actor(caller()))
        return sc.schedule_to_proto(updated)

    @unary
    async def DeleteSchedule(
        self, request: pb.DeleteScheduleRequest, context: Ctx
    ) -> pb.DeleteScheduleResponse:
        project, schedule = await self._acting(
            request.project_id, request.schedule_id, "ScheduleService.DeleteSchedule"
        )
        await self._schedules.delete(project, schedule, validation.etag(request.etag))
        return pb.DeleteScheduleResponse()

    @unary
    async def PauseSchedule(self, request: pb.PauseScheduleRequest, context: Ctx) -> pb.Schedule:
        project, schedule = await self._acting(
            request.project_id, request.schedule_id, "ScheduleService.PauseSchedule"
        )
        note = validation.text(request.note, "note", 400) or ""
        paused = await self._schedules.pause(project, schedule, note, _actor(caller()))
        return sc.schedule_to_proto(paused)

    @unary
    async def ResumeSchedule(self, request: pb.ResumeScheduleRequest, context: Ctx) -> pb.Schedule:
        project, schedule = await self._acting(
            request.project_id, request.schedule_id, "ScheduleService.ResumeSchedule"
        )
        return sc.schedule_to_proto(
            await self._schedules.resume(project, schedule, _actor(caller()))
        )

    @unary
    async def BackfillSchedule(
        self, request: pb.BackfillScheduleRequest, context: Ctx
    ) -> pb.FireResponse:
        project, schedule = await self._acting(
            request.project_id, request.schedule_id, "ScheduleService.BackfillSchedule"
        )
        if not (request.HasField("start_time") and request.HasField("end_time")):
            raise InvalidArgument("start_time and end_time are required")
        if request.start_time.seconds < 0:
            raise InvalidArgument("start_time is before 1970: nothing to backfill there")
        overlap = sc.overlap(request.overlap_policy) if request.overlap_policy else None
        fired = await self._schedules.backfill(
            project,
            schedule,
            request.start_time.ToMilliseconds(),
            request.end_time.ToMilliseconds(),
            overlap,
            _actor(caller()),
        )
        return _fired(fired)

    @unary
    async def FireSchedule(self, request: pb.FireScheduleRequest, context: Ctx) -> pb.FireResponse:
        project, schedule = await self._acting(
            request.project_id, request.schedule_id, "ScheduleService.FireSchedule"
        )
        request_id = validation.request_id(request.request_id) if request.request_id else ""
        fired = await self._schedules.fire_now(project, schedule, request_id, _actor(caller()))
        return _fired(fired)

    @unary
    async def ListUpcomingFires(
        self, request: pb.ListUpcomingFiresRequest, context: Ctx
    ) -> pb.ListUpcomingFiresResponse:
        project, schedule_id = _seen(request.project_id, request.schedule_id)
        count = validation.in_range(request.count or 5, "count", 1, MAX_UPCOMING)
        schedule = await self._schedules.get(project, schedule_id)
        zone = schedule.calendar.time_zone if schedule.calendar is not None else "UTC"
        times = await self._schedules.upcoming(project, schedule_id, count)
        return pb.ListUpcomingFiresResponse(
            fires=[
                pb.UpcomingFire(fire_time=timestamp(t), local_time=sc.local_time(t, zone))
                for t in times
            ],
            time_zone=zone,
        )

    @unary
    async def ListScheduleEvents(
        self, request: pb.ListScheduleEventsRequest, context: Ctx
    ) -> pb.ListScheduleEventsResponse:
        project, schedule = _seen(request.project_id, request.schedule_id)
        size = validation.in_range(request.page_size or 50, "page_size", 1, MAX_PAGE)
        token = request.page_token
        if token and not token.isdigit():
            raise InvalidArgument("page_token is not one this server issued")
        events = await self._schedules.events(project, schedule, int(token or 0), size + 1)
        page = events[:size]
        return pb.ListScheduleEventsResponse(
            events=[sc.event_to_proto(e) for e in page],
            next_page_token=str(page[-1].sequence) if len(events) > size else "",
        )

    @unary
    async def RotateWebhookSecret(
        self, request: pb.RotateWebhookSecretRequest, context: Ctx
    ) -> pb.CreateScheduleResponse:
        project, schedule_id = await self._acting(
            request.project_id, request.schedule_id, "ScheduleService.RotateWebhookSecret"
        )
        rotated, secret = await self._schedules.rotate_webhook_secret(
            project, schedule_id, _actor(caller())
        )
        return pb.CreateScheduleResponse(
            schedule=sc.schedule_to_proto(rotated), webhook_secret=secret
        )


#: Bad signatures one schedule may get within BAD_SIGNATURE_WINDOW_S before the next are
#: refused with TOO_MANY_BAD_SIGNATURES (docs/gateway.md "Webhook deliveries").
BAD_SIGNATURE_LIMIT = 20
BAD_SIGNATURE_WINDOW_S = 60.0


class WebhookServicer(schedule_service_pb2_grpc.WebhookServiceServicer):
    """Deliveries, each checked by its signature first: a correctly signed one is never
    refused by the bound on bad ones, which is per schedule (the token bound of
    coordinator/api/credentials.py never sees them)."""

    def __init__(self, schedules: Schedules, bad_signatures: SlidingBound | None = None) -> None:
        self._schedules = schedules
        self._bad = bad_signatures or SlidingBound(BAD_SIGNATURE_LIMIT, BAD_SIGNATURE_WINDOW_S)

    @unary
    async def DeliverWebhook(
        self, request: pb.DeliverWebhookRequest, context: Ctx
    ) -> pb.FireResponse:
        project = validation.name(request.project_id, "project_id") or ""
        schedule = validation.name(request.schedule_id, "schedule_id") or ""
        delivery = validation.name(request.delivery_id, "delivery_id") or ""
        if "." in delivery:  # the signed text is "<t>.<delivery_id>.<body>": one reading only
            raise InvalidArgument("delivery_id may not contain '.'")
        try:
            fired = await self._schedules.deliver(
                project, schedule, delivery, request.signature[:256], request.body
            )
        except WebhookSignatureInvalid:
            wait = self._bad.refusal((project, schedule))
            if wait is not None:
                raise TooManyBadSignatures(
                    "too many deliveries with a bad signature for this schedule; wait",
                    retry_after_s=retry_after_seconds(wait),
                ) from None
            self._bad.failed((project, schedule))
            raise
        return _fired(fired)
