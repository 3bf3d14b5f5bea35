"""A schedule as plain data: the run template, when it fires, and what it has done so far.

Times are UTC epoch milliseconds. Everything here is immutable; the store reads and writes
these, the pure rules (automations/domain/plan.py) decide over them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from automations.domain.calendar import Calendar
from kernel import derived_keys


class Overlap(StrEnum):
    """What a fire does while an earlier run of the schedule is not finished (``unknown``
    counts as not finished: truerun cannot prove it ended)."""

    SKIP = "skip"  # the fire is recorded as skipped, no run
    BUFFER_ONE = "buffer_one"  # keep at most one fire, run it when the earlier run ends
    BUFFER_ALL = "buffer_all"  # keep every fire (up to MAX_BUFFERED), run them one by one
    CANCEL_PREVIOUS = "cancel_previous"  # durable cancel of the earlier runs, then run
    ALLOW_ALL = "allow_all"  # run regardless


class Catchup(StrEnum):
    """Fires missed inside the catch-up window (truerun down, the schedule paused)."""

    ONE = "one"  # coalesced: the latest of them runs, the others are recorded
    ALL = "all"  # each runs (in order, subject to the overlap policy)


class Source(StrEnum):
    """Where a fire came from: the actor of the run it creates."""

    SCHEDULE = "schedule"  # the calendar (actor scheduler)
    BACKFILL = "backfill"  # a person asked for a past range (actor: that person)
    MANUAL = "manual"  # "fire now" (actor: that person)
    WEBHOOK = "webhook"  # a signed delivery (actor trigger)


#: Buffered fires kept per schedule (buffer_all); more are skipped, and recorded as such.
MAX_BUFFERED = 100
#: Due fires one scheduler round handles per schedule (catch-up ``all``); the rest stay due.
MAX_FIRES_PER_ROUND = 100
DEFAULT_CATCHUP_WINDOW_MS = 5 * 60_000


@dataclass(frozen=True, slots=True)
class Template:
    """The run every fire creates (a subset of CreateRun: secret env only by reference)."""

    owner_id: str
    task_id: str
    agent_id: str | None = None
    priority: int = 0
    max_attempts: int = 1
    idempotent: bool = False
    required_labels: tuple[str, ...] = ()
    execution_scope: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Fire:
    """One fire waiting for a run: its idempotency key names it for good."""

    key: str
    fire_ms: int
    source: Source
    actor_id: str = ""


@dataclass(frozen=True, slots=True)
class Schedule:
    project_id: str
    schedule_id: str
    version: int
    template: Template
    calendar: Calendar | None  # None: fires only on a webhook delivery or "fire now"
    overlap: Overlap = Overlap.SKIP
    catchup: Catchup = Catchup.ONE
    catchup_window_ms: int = DEFAULT_CATCHUP_WINDOW_MS
    display_name: str = ""
    #: > 0: the webhook is on and signs with this generation's secret; <= 0: off, its
    #: magnitude kept so that turning it on again (a new generation) never revives an old
    #: secret. Rotating bumps it.
    webhook_generation: int = 0
    paused: bool = False
    pause_note: str = ""
    next_fire_ms: int | None = None
    wake_ms: int | None = None
    buffered: tuple[Fire, ...] = ()
    open_runs: tuple[str, ...] = ()  # runs it created that were not yet seen finished
    last_fire_ms: int | None = None
    last_run_id: str | None = None
    last_outcome: str = ""
    missed_total: int = 0
    created_by: str = ""
    created_at_ms: int = 0
    updated_at_ms: int = 0

    @property
    def webhook_enabled(self) -> bool:
        return self.webhook_generation > 0

    @property
    def trigger_id(self) -> str:
        return f"schedule:{self.schedule_id}"


@dataclass(frozen=True, slots=True)
class OpenRun:
    """An earlier run of the schedule that is not finished, as a person would name it."""

    run_id: str
    fire_ms: int | None
    shown: str  # the display state: queued, running, unknown, ...
    since_ms: int | None


@dataclass(frozen=True, slots=True)
class Note:
    """One schedule event: what was decided, in words a person reads."""

    type: str
    message: str
    fire_ms: int | None = None
    run_id: str | None = None


def fire_key(schedule_id: str, fire_ms: int) -> str:
    """The idempotency key of a calendar or backfill fire (seed B §10.1): the same fire
    time of the same schedule can only ever create one run. Built in the reserved key
    space (kernel/derived_keys.py), so no caller can create that run first."""
    return derived_keys.schedule_fire(schedule_id, fire_ms)


@dataclass(frozen=True, slots=True)
class ScheduleEvent:
    """A note as stored: numbered per schedule, with who acted."""

    sequence: int
    type: str
    message: str
    fire_ms: int | None
    run_id: str | None
    actor_type: str
    actor_id: str
    created_at_ms: int
