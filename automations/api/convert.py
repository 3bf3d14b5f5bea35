"""Schedules between protobuf and the domain, with the request checks (bad input is
INVALID_ARGUMENT with a message naming the field, and changes nothing)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from google.protobuf import duration_pb2
from truerun.v1 import schedule_service_pb2 as pb

from automations.domain.calendar import Calendar, Cron, Interval, InvalidCalendar, Once, validate
from automations.domain.model import (
    DEFAULT_CATCHUP_WINDOW_MS,
    Catchup,
    Fire,
    Overlap,
    Schedule,
    ScheduleEvent,
    Template,
)
from coordinator.api import convert, validation
from coordinator.api.convert import timestamp as ts
from kernel import json_bounds
from kernel.errors import InvalidArgument

_OVERLAP: dict[int, Overlap] = {
    pb.OVERLAP_POLICY_UNSPECIFIED: Overlap.SKIP,
    pb.OVERLAP_POLICY_SKIP: Overlap.SKIP,
    pb.OVERLAP_POLICY_BUFFER_ONE: Overlap.BUFFER_ONE,
    pb.OVERLAP_POLICY_BUFFER_ALL: Overlap.BUFFER_ALL,
    pb.OVERLAP_POLICY_CANCEL_PREVIOUS: Overlap.CANCEL_PREVIOUS,
    pb.OVERLAP_POLICY_ALLOW_ALL: Overlap.ALLOW_ALL,
}
_OVERLAP_NUMBER: dict[Overlap, pb.OverlapPolicy.ValueType] = {
    Overlap.SKIP: pb.OVERLAP_POLICY_SKIP,
    Overlap.BUFFER_ONE: pb.OVERLAP_POLICY_BUFFER_ONE,
    Overlap.BUFFER_ALL: pb.OVERLAP_POLICY_BUFFER_ALL,
    Overlap.CANCEL_PREVIOUS: pb.OVERLAP_POLICY_CANCEL_PREVIOUS,
    Overlap.ALLOW_ALL: pb.OVERLAP_POLICY_ALLOW_ALL,
}
_CATCHUP: dict[int, Catchup] = {
    pb.CATCHUP_POLICY_UNSPECIFIED: Catchup.ONE,
    pb.CATCHUP_POLICY_ONE: Catchup.ONE,
    pb.CATCHUP_POLICY_ALL: Catchup.ALL,
}
_CATCHUP_NUMBER = {Catchup.ONE: pb.CATCHUP_POLICY_ONE, Catchup.ALL: pb.CATCHUP_POLICY_ALL}
MAX_CATCHUP_WINDOW_MS = 366 * 24 * 3_600_000
#: Longer intervals put the next fire past what a Timestamp holds (year 9999).
MAX_INTERVAL_MS = 36_525 * 24 * 3_600_000  # 100 years


def duration(ms: int) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromMilliseconds(ms)
    return value


def overlap(number: int) -> Overlap:
    if number not in _OVERLAP:
        raise InvalidArgument(f"unknown overlap_policy {number}")
    return _OVERLAP[number]


def local_time(ms: int, zone: str) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone)).isoformat()


def calendar(spec: pb.ScheduleSpec) -> Calendar | None:
    given = [
        name
        for name, present in (
            ("cron", bool(spec.cron)),
            ("interval", spec.HasField("interval")),
            ("at", spec.HasField("at")),
        )
        if present
    ]
    if len(given) > 1:
        raise InvalidArgument(f"spec: give one of cron, interval, at (got {', '.join(given)})")
    if not given:
        return None
    timing: Cron | Interval | Once
    if spec.cron:
        timing = Cron(spec.cron.strip())
    elif spec.HasField("interval"):
        if spec.interval.ToMilliseconds() > MAX_INTERVAL_MS:
            raise InvalidArgument("spec.interval: at most 100 years")
        timing = Interval(spec.interval.ToMilliseconds(), spec.interval_offset.ToMilliseconds())
    else:
        timing = Once(spec.at.ToMilliseconds())
    try:
        return validate(
            Calendar(
                timing,
                time_zone=spec.time_zone or "UTC",
                start_ms=spec.start_time.ToMilliseconds() if spec.HasField("start_time") else None,
                end_ms=spec.end_time.ToMilliseconds() if spec.HasField("end_time") else None,
                jitter_ms=spec.jitter.ToMilliseconds(),
            )
        )
    except InvalidCalendar as exc:
        raise InvalidArgument(f"spec: {exc}") from None


def template(message: pb.RunTemplate) -> Template:
    spec = convert.struct_to_dict(message.spec)
    if message.spec.ByteSize() > validation.MAX_SPEC_BYTES:
        raise InvalidArgument(f"template.spec is larger than {validation.MAX_SPEC_BYTES} bytes")
    json_bounds.check(spec, json_bounds.current(), "template.spec")  # what readers render
    validation.self_fence_after_ms(spec)
    validation.command_spec(spec)
    if len(message.required_labels) > validation.MAX_LABELS:
        raise InvalidArgument(f"at most {validation.MAX_LABELS} template.required_labels")
    return Template(
        owner_id=validation.name(message.owner_id, "template.owner_id") or "",
        task_id=validation.name(message.task_id, "template.task_id") or "",
        agent_id=validation.name(message.agent_id, "template.agent_id", required=False),
        priority=validation.in_range(message.priority, "template.priority", -1000, 1000),
        max_attempts=validation.in_range(
            message.max_attempts or 1, "template.max_attempts", 1, 100
        ),
        idempotent=message.idempotent,
        required_labels=tuple(
            validation.name(label, "template.required_labels[]") or ""
            for label in message.required_labels
        ),
        execution_scope=validation.name(
            message.execution_scope, "template.execution_scope", required=False
        ),
        spec=spec,
    )


def schedule_from_proto(message: pb.Schedule) -> Schedule:
    if message.catchup_policy not in _CATCHUP:
        raise InvalidArgument(f"unknown catchup_policy {message.catchup_policy}")
    window = (
        message.catchup_window.ToMilliseconds()
        if message.HasField("catchup_window")
        else DEFAULT_CATCHUP_WINDOW_MS
    )
    return Schedule(
        project_id=validation.name(message.project_id, "schedule.project_id") or "",
        schedule_id=validation.name(message.schedule_id, "schedule.schedule_id") or "",
        version=0,
        template=template(message.template),
        calendar=calendar(message.spec),
        overlap=overlap(message.overlap_policy),
        catchup=_CATCHUP[message.catchup_policy],
        catchup_window_ms=validation.in_range(
            window, "schedule.catchup_window (ms)", 0, MAX_CATCHUP_WINDOW_MS
        ),
        display_name=validation.text(message.display_name, "schedule.display_name", 256) or "",
        webhook_generation=1 if message.webhook_enabled else 0,
    )


def webhook_path(schedule: Schedule) -> str:
    return f"/v1/projects/{schedule.project_id}/schedules/{schedule.schedule_id}:deliver"


def schedule_to_proto(s: Schedule) -> pb.Schedule:
    t = s.template
    message = pb.Schedule(
        name=f"projects/{s.project_id}/schedules/{s.schedule_id}",
        project_id=s.project_id,
        schedule_id=s.schedule_id,
        display_name=s.display_name,
        template=pb.RunTemplate(
            owner_id=t.owner_id,
            task_id=t.task_id,
            agent_id=t.agent_id or "",
            priority=t.priority,
            max_attempts=t.max_attempts,
            idempotent=t.idempotent,
            required_labels=list(t.required_labels),
            execution_scope=t.execution_scope or "",
            spec=convert.struct(t.spec),
        ),
        overlap_policy=_OVERLAP_NUMBER[s.overlap],
        catchup_window=duration(s.catchup_window_ms),
        catchup_policy=_CATCHUP_NUMBER[s.catchup],
        webhook_enabled=s.webhook_enabled,
        webhook_path=webhook_path(s) if s.webhook_enabled else "",
        paused=s.paused,
        pause_note=s.pause_note,
        last_run_id=s.last_run_id or "",
        last_outcome=s.last_outcome,
        missed_total=s.missed_total,
        buffered_fire_times=[ts(f.fire_ms) for f in s.buffered],
        open_run_ids=list(s.open_runs),
        etag=convert.etag_of(s.version),
        created_by=s.created_by,
        create_time=ts(s.created_at_ms),
        update_time=ts(s.updated_at_ms),
    )
    cal = s.calendar
    if cal is not None:
        spec = message.spec
        spec.time_zone = cal.time_zone
        if isinstance(cal.timing, Cron):
            spec.cron = cal.timing.expression
        elif isinstance(cal.timing, Interval):
            spec.interval.CopyFrom(duration(cal.timing.every_ms))
            spec.interval_offset.CopyFrom(duration(cal.timing.offset_ms))
        else:
            spec.at.CopyFrom(ts(cal.timing.at_ms))
        if cal.start_ms is not None:
            spec.start_time.CopyFrom(ts(cal.start_ms))
        if cal.end_ms is not None:
            spec.end_time.CopyFrom(ts(cal.end_ms))
        spec.jitter.CopyFrom(duration(cal.jitter_ms))
    if s.next_fire_ms is not None:
        message.next_fire_time.CopyFrom(ts(s.next_fire_ms))
    if s.last_fire_ms is not None:
        message.last_fire_time.CopyFrom(ts(s.last_fire_ms))
    return message


def fired_to_proto(
    runs: tuple[tuple[Fire, str, bool], ...], notes: tuple[str, ...], schedule: Schedule
) -> pb.FireResponse:
    return pb.FireResponse(
        runs=[
            pb.FiredRun(fire_time=ts(fire.fire_ms), run_id=run_id, existing=existing)
            for fire, run_id, existing in runs
        ],
        notes=list(notes),
        schedule=schedule_to_proto(schedule),
    )


def event_to_proto(e: ScheduleEvent) -> pb.ScheduleEvent:
    message = pb.ScheduleEvent(
        sequence=e.sequence,
        type=e.type,
        message=e.message,
        run_id=e.run_id or "",
        actor_type=e.actor_type,
        actor_id=e.actor_id,
        create_time=ts(e.created_at_ms),
    )
    if e.fire_ms is not None:
        message.fire_time.CopyFrom(ts(e.fire_ms))
    return message


def page_token(project_id: str, schedule_id: str) -> str:
    return base64.urlsafe_b64encode(f"{project_id}\0{schedule_id}".encode()).decode()


def after_token(token: str) -> tuple[str, str] | None:
    if not token:
        return None
    try:
        project_id, schedule_id = base64.urlsafe_b64decode(token).decode().split("\0")
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument("page_token is not one this server issued") from None
    return project_id, schedule_id
