"""The schedule commands (create, update, pause, resume, delete, backfill, fire now, a
webhook delivery) and reads. Every write is one transaction opened through the coordinator's
door: the schedule row is locked, compared on its version, and any run a command fires is
created in the same commit (automations/service/fires.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from automations.domain.calendar import fires_between, next_fire, upcoming
from automations.domain.model import Fire, Note, Overlap, Schedule, ScheduleEvent, Source, fire_key
from automations.domain.plan import Plan, apply_overlap, wake_at
from automations.domain.webhooks import secret_for, verify
from automations.service.fires import Carried, carry_out, open_runs
from automations.store.sql import ScheduleChanged, ScheduleExists, ScheduleSql
from coordinator.domain.redaction import redact_keys
from coordinator.service.transitions import DoorTx, Transitions
from kernel import derived_keys, json_bounds
from kernel.errors import (
    IdempotencyKeyConflict,
    InvalidArgument,
    ScheduleNotFound,
    ScheduleVersionConflict,
    WebhookSignatureInvalid,
    WebhooksNotConfigured,
)
from kernel.errors import ScheduleExists as ScheduleExistsError
from kernel.ids import now_ms, uuid7

MAX_BACKFILL_FIRES = 1_000
MAX_WEBHOOK_BODY = 64 * 1024


@dataclass(frozen=True, slots=True)
class Fired:
    schedule: Schedule
    runs: tuple[tuple[Fire, str, bool], ...]  # (fire, run id, existing)
    notes: tuple[str, ...]


def first_fire(schedule: Schedule, now: int) -> Schedule:
    """The schedule as it starts (or restarts its timing) at ``now``: its next fire is the
    first one after now; nothing earlier counts as missed."""
    fire = next_fire(schedule.calendar, now) if schedule.calendar is not None else None
    started = replace(schedule, next_fire_ms=fire)
    return replace(started, wake_ms=wake_at(started, now))


class Schedules:
    def __init__(
        self,
        transitions: Transitions,
        sql: ScheduleSql,
        webhook_key: bytes = b"",
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._transitions = transitions
        self._sql = sql
        self._key = webhook_key
        self._clock = clock

    # -- reads -------------------------------------------------------------------------

    async def get(self, project_id: str, schedule_id: str) -> Schedule:
        found = await self._sql.get(None, project_id, schedule_id)
        if found is None:
            raise ScheduleNotFound(
                f"schedule {schedule_id} does not exist in project {project_id}",
                schedule_id=schedule_id,
            )
        return found

    async def list_schedules(
        self, project_ids: Sequence[str] | None, after: tuple[str, str] | None, limit: int
    ) -> list[Schedule]:
        return await self._sql.list_schedules(project_ids, after, limit)

    async def upcoming(self, project_id: str, schedule_id: str, count: int) -> list[int]:
        schedule = await self.get(project_id, schedule_id)
        if schedule.calendar is None or schedule.next_fire_ms is None:
            return []
        return [
            schedule.next_fire_ms,
            *upcoming(schedule.calendar, schedule.next_fire_ms, count - 1),
        ]

    async def events(
        self, project_id: str, schedule_id: str, before: int, limit: int
    ) -> list[ScheduleEvent]:
        await self.get(project_id, schedule_id)
        return await self._sql.events(project_id, schedule_id, before, limit)

    # -- writes ------------------------------------------------------------------------

    async def create(self, schedule: Schedule, actor: tuple[str, str]) -> tuple[Schedule, str]:
        """The new schedule and, with a webhook, its signing secret (shown once)."""
        now = self._clock()
        if schedule.webhook_enabled and not self._key:
            raise WebhooksNotConfigured("this server has no TRUERUN_WEBHOOK_KEY: no webhooks")
        new = first_fire(
            replace(schedule, version=1, created_by=actor[1], created_at_ms=now, updated_at_ms=now),
            now,
        )
        async with self._transitions.transaction([]) as tx:
            try:
                await self._sql.insert(tx, new)
            except ScheduleExists:
                raise ScheduleExistsError(
                    f"project {new.project_id} already has schedule {new.schedule_id}",
                    schedule_id=new.schedule_id,
                ) from None
            await self._sql.append(tx, new, [Note("created", "created")], actor, now)
        return new, self._secret(new)

    def _secret(self, schedule: Schedule) -> str:
        if not schedule.webhook_enabled:
            return ""
        # The creation time names this schedule's incarnation: one deleted and created again
        # under the same id never signs with a secret its predecessor gave out.
        incarnation = f"{schedule.schedule_id}@{schedule.created_at_ms}"
        return secret_for(self._key, schedule.project_id, incarnation, schedule.webhook_generation)

    async def update(
        self, changed: Schedule, expected_version: int, actor: tuple[str, str]
    ) -> Schedule:
        """Replace the template, timing and policies; a new timing starts from now."""

        async def change(current: Schedule, tx: DoorTx, now: int) -> tuple[Schedule, str]:
            if changed.webhook_enabled and not current.webhook_enabled:
                raise InvalidArgument(
                    "turn a schedule's webhook on with RotateWebhookSecret, which shows its "
                    "new secret once"
                )
            updated = replace(
                current,
                display_name=changed.display_name,
                template=changed.template,
                calendar=changed.calendar,
                overlap=changed.overlap,
                catchup=changed.catchup,
                catchup_window_ms=changed.catchup_window_ms,
                webhook_generation=(
                    current.webhook_generation
                    if changed.webhook_enabled
                    else -abs(current.webhook_generation)
                ),
            )
            if changed.calendar != current.calendar:
                updated = first_fire(updated, now)
            return updated, "updated"

        return await self._mutate(
            changed.project_id, changed.schedule_id, expected_version, change, actor
        )

    async def rotate_webhook_secret(
        self, project_id: str, schedule_id: str, actor: tuple[str, str]
    ) -> tuple[Schedule, str]:
        """A new signing secret (shown once; the old one stops working at once), turning the
        webhook on if it was off."""
        if not self._key:
            raise WebhooksNotConfigured("this server has no TRUERUN_WEBHOOK_KEY: no webhooks")

        async def change(current: Schedule, tx: DoorTx, now: int) -> tuple[Schedule, str]:
            rotated = replace(current, webhook_generation=abs(current.webhook_generation) + 1)
            return rotated, f"updated webhook secret: rotated by {actor[1]}"

        rotated = await self._mutate(project_id, schedule_id, None, change, actor)
        return rotated, self._secret(rotated)

    async def pause(
        self, project_id: str, schedule_id: str, note: str, actor: tuple[str, str]
    ) -> Schedule:
        async def change(current: Schedule, tx: DoorTx, now: int) -> tuple[Schedule, str]:
            words = f"paused by {actor[1]}" + (f": {note}" if note else "")
            return replace(current, paused=True, pause_note=words[:512], wake_ms=None), words

        return await self._mutate(project_id, schedule_id, None, change, actor)

    async def resume(self, project_id: str, schedule_id: str, actor: tuple[str, str]) -> Schedule:
        async def change(current: Schedule, tx: DoorTx, now: int) -> tuple[Schedule, str]:
            resumed = replace(current, paused=False, pause_note="")
            # Fires that fell due while paused meet the catch-up window in the next round.
            return replace(resumed, wake_ms=wake_at(resumed, now)), f"resumed by {actor[1]}"

        return await self._mutate(project_id, schedule_id, None, change, actor)

    async def delete(self, project_id: str, schedule_id: str, expected_version: int | None) -> None:
        async with self._transitions.transaction([]) as tx:
            current = await self._locked(tx, project_id, schedule_id)
            if expected_version is not None and current.version != expected_version:
                raise self._conflict(current)
            await self._sql.delete(tx, project_id, schedule_id, current.version)

    async def _mutate(
        self,
        project_id: str,
        schedule_id: str,
        expected_version: int | None,
        change: Callable[[Schedule, DoorTx, int], Awaitable[tuple[Schedule, str]]],
        actor: tuple[str, str],
    ) -> Schedule:
        now = self._clock()
        async with self._transitions.transaction([]) as tx:
            current = await self._locked(tx, project_id, schedule_id)
            if expected_version is not None and current.version != expected_version:
                raise self._conflict(current)
            updated, words = await change(current, tx, now)
            updated = replace(updated, version=current.version + 1, updated_at_ms=now)
            try:
                await self._sql.update(tx, updated, current.version)
            except ScheduleChanged:
                raise self._conflict(current) from None
            kind = words.split(" ", 1)[0]
            await self._sql.append(tx, updated, [Note(kind, words)], actor, now)
        return updated

    async def _locked(self, tx: DoorTx, project_id: str, schedule_id: str) -> Schedule:
        current = await self._sql.get(tx, project_id, schedule_id, lock=True)
        if current is None:
            raise ScheduleNotFound(
                f"schedule {schedule_id} does not exist in project {project_id}",
                schedule_id=schedule_id,
            )
        return current

    @staticmethod
    def _conflict(current: Schedule) -> ScheduleVersionConflict:
        return ScheduleVersionConflict(
            f"schedule {current.schedule_id} is at etag {current.version}; read it again",
            schedule_id=current.schedule_id,
        )

    # -- fires -------------------------------------------------------------------------

    async def backfill(
        self,
        project_id: str,
        schedule_id: str,
        start_ms: int,
        end_ms: int,
        overlap: Overlap | None,
        actor: tuple[str, str],
    ) -> Fired:
        """Every calendar fire in [start, end], each keyed by its own fire time."""
        if end_ms < start_ms:
            raise InvalidArgument("end_time is before start_time")
        schedule = await self.get(project_id, schedule_id)
        if schedule.calendar is None:
            raise InvalidArgument(f"schedule {schedule_id} has no timing to backfill")
        times = fires_between(schedule.calendar, start_ms - 1, end_ms, MAX_BACKFILL_FIRES + 1)
        if len(times) > MAX_BACKFILL_FIRES:
            raise InvalidArgument(f"the range holds more than {MAX_BACKFILL_FIRES} fires")
        fires = tuple(Fire(fire_key(schedule_id, t), t, Source.BACKFILL, actor[1]) for t in times)
        note = Note("backfill", f"backfill of {len(fires)} fire(s) asked by {actor[1]}")
        return await self._fire(project_id, schedule_id, fires, overlap, actor, note)

    async def fire_now(
        self, project_id: str, schedule_id: str, request_id: str, actor: tuple[str, str]
    ) -> Fired:
        """One fire now; a repeated ``request_id`` finds the run it created."""
        token = request_id or uuid7()
        fire = Fire(
            derived_keys.schedule_manual(schedule_id, token), self._clock(), Source.MANUAL, actor[1]
        )
        return await self._fire(project_id, schedule_id, (fire,), None, actor)

    async def deliver(
        self, project_id: str, schedule_id: str, delivery_id: str, signature: str, body: bytes
    ) -> Fired:
        """A webhook delivery: signature first (nothing else is said to an unsigned caller),
        then one fire keyed by the delivery id."""
        if not self._key:
            raise WebhooksNotConfigured("this server has no TRUERUN_WEBHOOK_KEY: no webhooks")
        refused = WebhookSignatureInvalid("the delivery's signature does not check out")
        bounds = json_bounds.current()
        for header, value in (
            ("X-Truerun-Delivery", delivery_id),
            ("X-Truerun-Signature", signature),
        ):
            if len(value) > bounds.max_string:  # said before anything of the schedule is
                raise json_bounds.refusal(
                    json_bounds.Violation(json_bounds.STRING, bounds.max_string, len(value)),
                    f"the delivery's {header} header",
                )
        schedule = await self._sql.get(None, project_id, schedule_id)
        if schedule is None or not schedule.webhook_enabled or len(body) > MAX_WEBHOOK_BODY:
            raise refused
        if not verify(self._secret(schedule), signature, delivery_id, body, self._clock()):
            raise refused
        key = derived_keys.schedule_delivery(schedule_id, delivery_id)
        fire = Fire(key, self._clock(), Source.WEBHOOK)
        payload = _payload(body, bounds)  # past a bound: refused, nothing written
        return await self._fire(
            project_id,
            schedule_id,
            (fire,),
            None,
            ("trigger", schedule.trigger_id),
            extra={"webhook": {"delivery_id": delivery_id, "payload": payload}},
        )

    async def _fire(
        self,
        project_id: str,
        schedule_id: str,
        fires: tuple[Fire, ...],
        overlap: Overlap | None,
        actor: tuple[str, str],
        note: Note | None = None,
        extra: dict[str, object] | None = None,
    ) -> Fired:
        for _ in range(3):
            now = self._clock()
            try:
                async with self._transitions.transaction([]) as tx:
                    current = await self._locked(tx, project_id, schedule_id)
                    still_open = await open_runs(tx, current)
                    # A fire time that already has its run keeps it, whatever the overlap
                    # policy says now: the answer to a repeat is the run, never a skip.
                    had: list[tuple[Fire, str, bool]] = []
                    new: list[Fire] = []
                    for fire in fires:
                        found = await tx.find_by_idempotency_key(project_id, fire.key)
                        if found is None:
                            new.append(fire)
                        else:  # answered with the fire time that created it
                            first = found.run.spec.get("schedule", {}).get("fire_time_ms")
                            at = first if isinstance(first, int) else fire.fire_ms
                            had.append((replace(fire, fire_ms=at), found.run.id, True))
                    if current.paused and any(f.source is Source.WEBHOOK for f in new):
                        # Paused means no automatic fire; a person's "fire now" still runs.
                        plan = Plan(
                            current,
                            notes=tuple(
                                Note(
                                    "skipped",
                                    f"skipped delivery {f.key.rsplit(':', 1)[-1]}: "
                                    f"{current.pause_note or 'the schedule is paused'}",
                                    fire_ms=f.fire_ms,
                                )
                                for f in new
                            ),
                        )
                    else:
                        plan = apply_overlap(current, now, still_open, tuple(new), overlap=overlap)
                    if note is not None:
                        plan = replace(plan, notes=(note, *plan.notes))
                    carried: Carried = await carry_out(
                        self._transitions,
                        self._sql,
                        tx,
                        current,
                        still_open,
                        plan,
                        actor,
                        now,
                        extra=extra,
                    )
            except (ScheduleChanged, IdempotencyKeyConflict):
                continue  # a twin committed the same fire first: its run is ours
            self._transitions.published(carried.results)
            words = tuple(n.message for n in plan.notes)
            runs = sorted((*had, *carried.runs), key=lambda run: run[0].fire_ms)
            return Fired(carried.schedule, tuple(runs), words)
        raise ScheduleVersionConflict(f"schedule {schedule_id} kept changing; try again")


def _payload(body: bytes, bounds: json_bounds.Bounds) -> object:
    """A JSON body as given, redacted (data from outside: a string under a secret-named key
    at any depth, ``{"password": ...}``, and every secret-looking string); anything else by
    size only. A JSON body past an input bound (its depth judged on the text, before any
    parser sees it) is refused (docs/automations.md "Jitter, bounds, limits")."""
    try:
        value = json_bounds.loads(body, bounds, "the delivery's body") if body else None
    except ValueError:
        return {"bytes": len(body)}
    return redact_keys(value)
