"""What a schedule does now: which fires are due, which were missed, and what the overlap
policy makes of each one. Pure: a schedule, the time, the earlier runs that are not
finished -> a plan (runs to create, runs to cancel, notes for people, the schedule's new
state). The service (automations/service/scheduler.py) carries a plan out in one
transaction through the coordinator's door. docs/automations.md has the rules in prose.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from automations.domain.calendar import clock_text, fires_between, jitter_for, next_fire
from automations.domain.model import (
    MAX_BUFFERED,
    MAX_FIRES_PER_ROUND,
    Catchup,
    Fire,
    Note,
    OpenRun,
    Overlap,
    Schedule,
    Source,
    fire_key,
)

#: How often a schedule with buffered fires is looked at again while its earlier run runs.
RECHECK_MS = 1_000
#: Missed fires are counted up to this many (a 1 s schedule down for a week is "10000+").
MISSED_COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class Plan:
    schedule: Schedule  # the new state (the store bumps the version when it writes it)
    creates: tuple[Fire, ...] = ()
    cancels: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()


def _zone(schedule: Schedule) -> str:
    return schedule.calendar.time_zone if schedule.calendar is not None else "UTC"


def _due_at(schedule: Schedule, fire_ms: int) -> int:
    jitter = schedule.calendar.jitter_ms if schedule.calendar is not None else 0
    return fire_ms + jitter_for(schedule.trigger_id, fire_ms, jitter)


def window_start(schedule: Schedule, now_ms: int) -> int:
    """The oldest nominal fire time still caught up at ``now_ms``: the catch-up window, widened
    by the jitter bound, so that a fire delayed by its own jitter is never counted missed."""
    jitter = schedule.calendar.jitter_ms if schedule.calendar is not None else 0
    return now_ms - schedule.catchup_window_ms - jitter


def _span(first: int, last: int, zone: str) -> str:
    if first == last:
        return clock_text(first, zone)
    return f"{clock_text(first, zone)}..{clock_text(last, zone)}"


def wake_at(schedule: Schedule, now_ms: int) -> int | None:
    """When a scheduler next has something to do for this schedule."""
    if schedule.paused:
        return None
    times = []
    if schedule.next_fire_ms is not None:
        times.append(_due_at(schedule, schedule.next_fire_ms))
    if schedule.buffered:
        times.append(now_ms + RECHECK_MS)
    return min(times) if times else None


def plan_round(schedule: Schedule, now_ms: int, open_runs: tuple[OpenRun, ...]) -> Plan:
    """One scheduler round for a due schedule: missed fires outside the catch-up window are
    recorded, those inside it are coalesced (``one``) or kept (``all``), buffered fires run
    first when the earlier run has ended, and every fire meets the overlap policy."""
    if schedule.paused:
        return Plan(replace(schedule, wake_ms=None))
    notes: list[Note] = []
    due, next_fire_ms, missed = _due_fires(schedule, now_ms)
    zone = _zone(schedule)
    if missed:
        count, first, last = missed
        capped = count >= MISSED_COUNT_CAP
        # Capped, the last one counted is not the last one missed: say only what is known.
        last_text = f"last before {clock_text(window_start(schedule, now_ms), zone)}"
        if not capped:
            last_text = f"last {clock_text(last, zone)}"
        notes.append(
            Note(
                "missed",
                f"missed {count}{'+' if capped else ''} fire{'s' if count != 1 else ''} while "
                f"truerun was not running or the schedule was paused, first "
                f"{clock_text(first, zone)}, {last_text} (outside the catch-up window)",
                fire_ms=last,
            )
        )
    if schedule.catchup is Catchup.ONE and len(due) > 1:
        kept = due[-1]
        notes.append(
            Note(
                "coalesced",
                f"coalesced {len(due) - 1} late fire{'s' if len(due) > 2 else ''} "
                f"({_span(due[0], due[-2], zone)}) into {clock_text(kept, zone)}",
                fire_ms=kept,
            )
        )
        due = [kept]
    fires = [Fire(fire_key(schedule.schedule_id, f), f, Source.SCHEDULE) for f in due]
    moved = replace(
        schedule,
        next_fire_ms=next_fire_ms,
        last_fire_ms=due[-1] if due else schedule.last_fire_ms,
        missed_total=schedule.missed_total + (missed[0] if missed else 0),
    )
    plan = apply_overlap(moved, now_ms, open_runs, tuple(fires), drain=True)
    return replace(plan, notes=(*notes, *plan.notes))


def _due_fires(
    schedule: Schedule, now_ms: int
) -> tuple[list[int], int | None, tuple[int, int, int] | None]:
    """The due fires inside the catch-up window (at most MAX_FIRES_PER_ROUND), the next fire
    after them, and the missed ones outside it as (count, first, last)."""
    calendar, first = schedule.calendar, schedule.next_fire_ms
    if calendar is None or first is None:
        return [], first, None
    start = window_start(schedule, now_ms)
    missed = None
    if first < start and _due_at(schedule, first) <= now_ms:
        outside = [first, *fires_between(calendar, first, start - 1, MISSED_COUNT_CAP - 1)]
        missed = (len(outside), outside[0], outside[-1])
        first = next_fire(calendar, start - 1)
    due: list[int] = []
    cursor = first
    limit = MAX_FIRES_PER_ROUND if schedule.catchup is Catchup.ALL else MISSED_COUNT_CAP
    while cursor is not None and _due_at(schedule, cursor) <= now_ms and len(due) < limit:
        due.append(cursor)
        cursor = next_fire(calendar, cursor)
    return due, cursor, missed


def apply_overlap(
    schedule: Schedule,
    now_ms: int,
    open_runs: tuple[OpenRun, ...],
    fires: tuple[Fire, ...],
    drain: bool = False,
    overlap: Overlap | None = None,
) -> Plan:
    """Each fire in order meets the overlap policy (``overlap`` overrides the schedule's,
    for a backfill). ``drain``: a buffered fire runs first when nothing is open. A run
    created here counts as open for the fires after it."""
    policy = overlap or schedule.overlap
    zone = _zone(schedule)
    open_now = list(open_runs)
    buffered = list(schedule.buffered)
    creates: list[Fire] = []
    cancels: list[str] = []
    notes: list[Note] = []
    last_outcome = schedule.last_outcome

    def create(fire: Fire) -> None:
        creates.append(fire)
        open_now.append(OpenRun("", fire.fire_ms, "queued", now_ms))

    if drain and buffered and not open_now:
        fire = buffered.pop(0)
        notes.append(
            Note(
                "unbuffered",
                f"ran buffered fire {clock_text(fire.fire_ms, zone)}: the earlier run ended",
                fire_ms=fire.fire_ms,
            )
        )
        create(fire)
    for fire in fires:
        at = clock_text(fire.fire_ms, zone)
        if not open_now or policy is Overlap.ALLOW_ALL:
            create(fire)
            continue
        blocking = _describe(open_now[0], zone)
        if policy is Overlap.SKIP:
            notes.append(Note("skipped", f"skipped {at}: {blocking}", fire_ms=fire.fire_ms))
            last_outcome = f"skipped {at}"
        elif policy is Overlap.BUFFER_ONE and buffered:
            notes.append(
                Note(
                    "skipped",
                    f"skipped {at}: {blocking}, and {clock_text(buffered[0].fire_ms, zone)} "
                    "already waits in the buffer (buffer_one)",
                    fire_ms=fire.fire_ms,
                )
            )
            last_outcome = f"skipped {at}"
        elif policy in (Overlap.BUFFER_ONE, Overlap.BUFFER_ALL):
            if len(buffered) >= MAX_BUFFERED:
                notes.append(
                    Note(
                        "skipped",
                        f"skipped {at}: {blocking}, and the buffer holds {MAX_BUFFERED} fires",
                        fire_ms=fire.fire_ms,
                    )
                )
                last_outcome = f"skipped {at}"
                continue
            buffered.append(fire)
            notes.append(Note("buffered", f"buffered {at}: {blocking}", fire_ms=fire.fire_ms))
            last_outcome = f"buffered {at}"
        else:  # CANCEL_PREVIOUS: the earlier runs are asked to cancel (durably), then run
            for earlier in open_now:
                if earlier.run_id and earlier.run_id not in cancels:
                    cancels.append(earlier.run_id)
                    notes.append(
                        Note(
                            "cancel_requested",
                            f"cancel requested for {_name(earlier, zone)}, "
                            f"{_state(earlier, zone)}, to start {at}",
                            fire_ms=fire.fire_ms,
                            run_id=earlier.run_id,
                        )
                    )
            open_now = [run for run in open_now if not run.run_id]
            create(fire)
    new = replace(
        schedule,
        buffered=tuple(buffered),
        last_outcome=last_outcome,
    )
    return Plan(
        replace(new, wake_ms=wake_at(new, now_ms)), tuple(creates), tuple(cancels), tuple(notes)
    )


def _describe(run: OpenRun, zone: str) -> str:
    """ "the 08:00 run is still unknown since 08:41"."""
    if not run.run_id:
        return f"{_name(run, zone)} created in this round is not finished"
    return f"{_name(run, zone)} is {_state(run, zone)}"


def _name(run: OpenRun, zone: str) -> str:
    return f"the {clock_text(run.fire_ms, zone)} run" if run.fire_ms is not None else "a run"


def _state(run: OpenRun, zone: str) -> str:
    """ "still unknown since 08:41"."""
    since = f" since {clock_text(run.since_ms, zone)}" if run.since_ms is not None else ""
    return f"still {run.shown}{since}"
