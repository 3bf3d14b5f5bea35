"""The idempotency keys truerun derives for the runs it creates itself, and the reserved
space they live in (docs/state-model.md "6a. Idempotency keys and request ids").

A schedule's fire, backfill, "fire now" and webhook delivery, and a long task's attempt, each
create their run with a key built here; finding a run under that key is how the creator
knows the work was already done, so it adopts that run instead of creating another. A
caller that could write a key of that shape could create a run under it first and have it
adopted in place of the real work (issue #36), so every public entry refuses a caller's
idempotency key or request id in this space with ``ReservedKey``: the builders below and
``refuse_reserved`` read the same ``Space`` members, so the two cannot drift.

The formats are the ones stored runs already carry (``schedule:<id>:<fire ms>``, ...), so
keys written before the space was reserved keep finding their runs.
"""

from __future__ import annotations

from enum import StrEnum

from kernel.errors import ReservedKey

SEPARATOR = ":"


class Space(StrEnum):
    """The first segment of every derived key; a new kind of derived key needs a member."""

    SCHEDULE = "schedule"  # calendar and backfill fires, fire now, webhook deliveries
    LONG_TASK = "long_task"  # a long task's attempt runs


#: What a caller's key or request id may not start with.
RESERVED_PREFIXES: tuple[str, ...] = tuple(space.value + SEPARATOR for space in Space)


def derived_key(space: Space, *parts: str | int) -> str:
    """The one way truerun builds a key of its own: ``<space>:<part>:<part>...``."""
    return SEPARATOR.join((space.value, *(str(part) for part in parts)))


def schedule_fire(schedule_id: str, fire_ms: int) -> str:
    """A calendar or backfill fire (seed B §10.1): one run per fire time of a schedule."""
    return derived_key(Space.SCHEDULE, schedule_id, fire_ms)


def schedule_manual(schedule_id: str, token: str) -> str:
    """A "fire now": one run per request id (or a fresh token without one)."""
    return derived_key(Space.SCHEDULE, schedule_id, "manual", token)


def schedule_delivery(schedule_id: str, delivery_id: str) -> str:
    """A signed webhook delivery: one run per delivery id."""
    return derived_key(Space.SCHEDULE, schedule_id, "delivery", delivery_id)


def long_task_attempt(task_id: str, attempt_no: int) -> str:
    """The run of a long task's attempt ``attempt_no``."""
    return derived_key(Space.LONG_TASK, task_id, "attempt", attempt_no)


def is_reserved(value: str) -> bool:
    return value.startswith(RESERVED_PREFIXES)


def refuse_reserved(value: str, field: str) -> str:
    """``value`` unchanged, unless it lies in the reserved space: then ``ReservedKey``
    (RESERVED_KEY, INVALID_ARGUMENT; REST 400). Called on every caller-supplied
    idempotency key and request id, before anything is read or written."""
    if is_reserved(value):
        raise ReservedKey(
            f"{field} {value[:64]!r} is in the space truerun keeps for the keys it derives "
            f"itself (it may not start with {' or '.join(repr(p) for p in RESERVED_PREFIXES)})",
            field=field,
        )
    return value
