"""Schedules <-> rows: the one place that knows the columns (kernel/db/schema.py)."""

from __future__ import annotations

import json
from typing import Any

from automations.domain.calendar import Calendar, Cron, Interval, Once
from automations.domain.model import Catchup, Fire, Overlap, Schedule, Source, Template

COLUMNS = (
    "project_id",
    "schedule_id",
    "version",
    "display_name",
    "template",
    "timing",
    "cron",
    "every_ms",
    "offset_ms",
    "at_ms",
    "time_zone",
    "start_ms",
    "end_ms",
    "jitter_ms",
    "overlap",
    "catchup_window_ms",
    "catchup",
    "webhook_generation",
    "paused",
    "pause_note",
    "next_fire_ms",
    "wake_ms",
    "buffered",
    "open_runs",
    "last_fire_ms",
    "last_run_id",
    "last_outcome",
    "missed_total",
    "created_by",
    "created_at_ms",
    "updated_at_ms",
)
#: What an update may change (the key and the creation never change).
MUTABLE = tuple(
    c for c in COLUMNS if c not in ("project_id", "schedule_id", "created_by", "created_at_ms")
)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def template_json(template: Template) -> str:
    return _dumps(
        {
            "owner_id": template.owner_id,
            "task_id": template.task_id,
            "agent_id": template.agent_id,
            "priority": template.priority,
            "max_attempts": template.max_attempts,
            "idempotent": template.idempotent,
            "required_labels": list(template.required_labels),
            "execution_scope": template.execution_scope,
            "spec": template.spec,
        }
    )


def template_from_json(text: str) -> Template:
    data = json.loads(text)
    return Template(
        owner_id=data["owner_id"],
        task_id=data["task_id"],
        agent_id=data["agent_id"],
        priority=data["priority"],
        max_attempts=data["max_attempts"],
        idempotent=data["idempotent"],
        required_labels=tuple(data["required_labels"]),
        execution_scope=data["execution_scope"],
        spec=data["spec"],
    )


def values(schedule: Schedule) -> dict[str, Any]:
    calendar = schedule.calendar
    timing = calendar.timing if calendar is not None else None
    return {
        "project_id": schedule.project_id,
        "schedule_id": schedule.schedule_id,
        "version": schedule.version,
        "display_name": schedule.display_name,
        "template": template_json(schedule.template),
        "timing": (
            "cron"
            if isinstance(timing, Cron)
            else "interval"
            if isinstance(timing, Interval)
            else "once"
            if isinstance(timing, Once)
            else "none"
        ),
        "cron": timing.expression if isinstance(timing, Cron) else None,
        "every_ms": timing.every_ms if isinstance(timing, Interval) else None,
        "offset_ms": timing.offset_ms if isinstance(timing, Interval) else None,
        "at_ms": timing.at_ms if isinstance(timing, Once) else None,
        "time_zone": calendar.time_zone if calendar is not None else "UTC",
        "start_ms": calendar.start_ms if calendar is not None else None,
        "end_ms": calendar.end_ms if calendar is not None else None,
        "jitter_ms": calendar.jitter_ms if calendar is not None else 0,
        "overlap": schedule.overlap.value,
        "catchup_window_ms": schedule.catchup_window_ms,
        "catchup": schedule.catchup.value,
        "webhook_generation": schedule.webhook_generation,
        "paused": schedule.paused,
        "pause_note": schedule.pause_note,
        "next_fire_ms": schedule.next_fire_ms,
        "wake_ms": schedule.wake_ms,
        "buffered": _dumps(
            [[f.key, f.fire_ms, f.source.value, f.actor_id] for f in schedule.buffered]
        ),
        "open_runs": _dumps(list(schedule.open_runs)),
        "last_fire_ms": schedule.last_fire_ms,
        "last_run_id": schedule.last_run_id,
        "last_outcome": schedule.last_outcome[:512],
        "missed_total": schedule.missed_total,
        "created_by": schedule.created_by,
        "created_at_ms": schedule.created_at_ms,
        "updated_at_ms": schedule.updated_at_ms,
    }


def schedule_from_row(row: Any) -> Schedule:
    timing: Cron | Interval | Once | None
    kind = row["timing"]
    if kind == "cron":
        timing = Cron(row["cron"])
    elif kind == "interval":
        timing = Interval(int(row["every_ms"]), int(row["offset_ms"] or 0))
    elif kind == "once":
        timing = Once(int(row["at_ms"]))
    else:
        timing = None
    calendar = (
        Calendar(
            timing,
            time_zone=row["time_zone"],
            start_ms=row["start_ms"],
            end_ms=row["end_ms"],
            jitter_ms=int(row["jitter_ms"]),
        )
        if timing is not None
        else None
    )
    return Schedule(
        project_id=row["project_id"],
        schedule_id=row["schedule_id"],
        version=int(row["version"]),
        template=template_from_json(row["template"]),
        calendar=calendar,
        overlap=Overlap(row["overlap"]),
        catchup=Catchup(row["catchup"]),
        catchup_window_ms=int(row["catchup_window_ms"]),
        display_name=row["display_name"],
        webhook_generation=int(row["webhook_generation"]),
        paused=bool(row["paused"]),
        pause_note=row["pause_note"],
        next_fire_ms=row["next_fire_ms"],
        wake_ms=row["wake_ms"],
        buffered=tuple(
            Fire(key, int(at), Source(source), actor)
            for key, at, source, actor in json.loads(row["buffered"])
        ),
        open_runs=tuple(json.loads(row["open_runs"])),
        last_fire_ms=row["last_fire_ms"],
        last_run_id=row["last_run_id"],
        last_outcome=row["last_outcome"],
        missed_total=int(row["missed_total"]),
        created_by=row["created_by"],
        created_at_ms=int(row["created_at_ms"]),
        updated_at_ms=int(row["updated_at_ms"]),
    )
