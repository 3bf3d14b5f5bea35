"""How `truerun schedule` shows schedules (services/cli/schedule.py): times in this
machine's local time (next fires also in the schedule's zone), timings in words, tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from google.protobuf import json_format, timestamp_pb2
from truerun.v1 import schedule_service_pb2 as pb

from automations.domain.calendar import interval_text
from services.cli.client import duration


def local(stamp: timestamp_pb2.Timestamp, zone: str = "", exact: bool = True) -> str:
    """2026-11-29 14:32:05 CET: in this machine's local time, or in ``zone``; ``exact``:
    with milliseconds when there are any (fire times), else to the second."""
    ms = stamp.ToMilliseconds()
    at = datetime.fromtimestamp(ms / 1000, UTC)
    try:
        shown = at.astimezone(ZoneInfo(zone)) if zone else at.astimezone()
    except (ZoneInfoNotFoundError, ValueError):
        shown = at
    fraction = f".{ms % 1000:03d}" if ms % 1000 and exact else ""
    return f"{shown:%Y-%m-%d %H:%M:%S}{fraction} {shown.tzname()}"


def relative(stamp: timestamp_pb2.Timestamp) -> str:
    seconds = stamp.ToMilliseconds() / 1000 - datetime.now(UTC).timestamp()
    return f"in {duration(seconds)}" if seconds >= 0 else f"{duration(-seconds)} ago"


def timing_text(s: pb.Schedule) -> str:
    spec = s.spec
    if spec.cron:
        return spec.cron
    if spec.HasField("interval"):
        every = f"every {interval_text(spec.interval.ToMilliseconds())}"
        offset = spec.interval_offset.ToMilliseconds()
        return every + (f" +{interval_text(offset)}" if offset else "")
    if spec.HasField("at"):
        return f"once at {local(spec.at)}"
    return "by webhook or fire only" if s.webhook_enabled else "by fire only"


def zone_of(s: pb.Schedule) -> str:
    timed = s.spec.cron or s.spec.HasField("interval") or s.spec.HasField("at")
    return (s.spec.time_zone or "UTC") if timed else "-"


def next_text(s: pb.Schedule) -> str:
    if s.paused:
        return s.pause_note or "paused"
    if not s.HasField("next_fire_time"):
        return "-"
    return f"{local(s.next_fire_time)} ({relative(s.next_fire_time)})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]])
        for r in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def policies_text(s: pb.Schedule) -> str:
    overlap = pb.OverlapPolicy.Name(s.overlap_policy).removeprefix("OVERLAP_POLICY_").lower()
    catchup = pb.CatchupPolicy.Name(s.catchup_policy).removeprefix("CATCHUP_POLICY_").lower()
    window = interval_text(s.catchup_window.ToMilliseconds())
    return f"overlap {overlap}   catch-up {catchup} within {window}"


def describe(
    s: pb.Schedule,
    upcoming: pb.ListUpcomingFiresResponse,
    events: Sequence[pb.ScheduleEvent] | None = None,
    open_runs: Sequence[str] = (),
) -> str:
    t = s.template
    title = f"  ({s.display_name})" if s.display_name else ""
    lines = [f"schedule   {s.schedule_id}{title}   project {s.project_id}"]
    timing = f"timing     {timing_text(s)}   zone {zone_of(s)}"
    if s.spec.HasField("start_time"):
        timing += f"   from {local(s.spec.start_time)}"
    if s.spec.HasField("end_time"):
        timing += f"   until {local(s.spec.end_time)}"
    if s.spec.jitter.ToMilliseconds():
        timing += f"   jitter < {interval_text(s.spec.jitter.ToMilliseconds())}"
    lines.append(timing)
    lines.append(f"state      {s.pause_note or 'paused' if s.paused else 'active'}")
    extra = f"   agent {t.agent_id}" if t.agent_id else ""
    extra += f"   labels {','.join(t.required_labels)}" if t.required_labels else ""
    extra += f"   scope {t.execution_scope}" if t.execution_scope else ""
    lines.append(
        f"template   task {t.task_id}   owner {t.owner_id}   priority {t.priority}"
        f"   max attempts {t.max_attempts}{extra}"
    )
    spec = json_format.MessageToDict(t.spec)
    lines.append(f"spec       {json.dumps(spec, sort_keys=True) if spec else '{}'}")
    lines.append(f"policies   {policies_text(s)}")
    if s.webhook_enabled:
        lines.append(f"webhook    POST {s.webhook_path} (through the gateway)")
    if s.last_outcome:
        lines.append(f"last       {s.last_outcome}")
    if s.HasField("last_fire_time"):
        lines.append(f"last fire  {local(s.last_fire_time)} ({relative(s.last_fire_time)})")
    lines.append(f"missed     {s.missed_total}")
    lines.append(
        f"created    {local(s.create_time, exact=False)} by {s.created_by}   etag {s.etag}"
    )
    zone = upcoming.time_zone or "UTC"
    lines.append(f"next fires (local | {zone})" if upcoming.fires else "next fires (none)")
    lines.extend(f"  {local(f.fire_time)}   {local(f.fire_time, zone)}" for f in upcoming.fires)
    lines.append("buffered" + ("" if s.buffered_fire_times else "   (none)"))
    lines.extend(f"  {local(b)}" for b in s.buffered_fire_times)
    lines.append(  # the scheduler prunes ended runs at its next round; each shows its state now
        "open runs (not yet seen finished by the scheduler; state now)"
        if s.open_run_ids
        else "open runs  (none)"
    )
    lines.extend(f"  {line}" for line in open_runs)
    hidden = len(s.open_run_ids) - len(open_runs)
    if hidden > 0:
        lines.append(f"  ... and {hidden} more")
    if events is not None:
        lines.append(f"events (the last {len(events)}, oldest first)")
        lines.extend(event_line(e) for e in reversed(events))
    return "\n".join(lines)


def event_line(e: pb.ScheduleEvent) -> str:
    return (
        f"  {e.sequence:>4}  {local(e.create_time, exact=False)}  {e.type:<16} {e.message}"
        f"  by {e.actor_type}:{e.actor_id}"
    )


def fired_text(response: pb.FireResponse) -> str:
    """Each fire time -> its run (existing marked), then the notes that say more."""
    lines = [
        f"{local(f.fire_time)}  ->  {f.run_id}" + ("  (existing)" if f.existing else "")
        for f in response.runs
    ]
    for note in response.notes:
        if not note.startswith(("fired ", "backfill ")) and "already has run" not in note:
            lines.append(f"note: {note}")
    return "\n".join(lines) or "nothing was fired"
