"""Request validation: anything malformed is INVALID_ARGUMENT before anything is read or written."""

from __future__ import annotations

import re
import uuid

from coordinator.domain.errors import InvalidArgument

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$")
MAX_TEXT = 512
MAX_SPEC_BYTES = 64 * 1024
MAX_LABELS = 32


def run_id(value: str, field: str = "id") -> str:
    """Run ids are UUIDs; anything else cannot name a run."""
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise InvalidArgument(f"{field} must be a run id (a UUID), got {value[:64]!r}") from None
    if str(parsed) != value.lower():
        raise InvalidArgument(f"{field} must be a UUID in canonical form")
    return value.lower()


def name(value: str, field: str, required: bool = True) -> str | None:
    if not value:
        if required:
            raise InvalidArgument(f"{field} is required")
        return None
    if not _NAME.match(value):
        raise InvalidArgument(
            f"{field} must be 1-128 characters of letters, digits and ._:@/+- "
            "(starting with a letter or digit)"
        )
    return value


def text(value: str, field: str, limit: int = MAX_TEXT) -> str | None:
    if len(value) > limit:
        raise InvalidArgument(f"{field} is longer than {limit} characters")
    return value or None


def request_id(value: str) -> str:
    if len(value) > 128 or not value.isprintable():
        raise InvalidArgument("request_id must be at most 128 printable characters")
    return value


def etag(value: str) -> int | None:
    """Etags are the quoted run version; an empty etag means "no version check"."""
    if not value:
        return None
    raw = value.removeprefix("W/").strip('"')
    if not raw.isdigit():
        raise InvalidArgument(f"etag {value[:32]!r} is not an etag this server issued")
    return int(raw)


def in_range(value: int, field: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise InvalidArgument(f"{field} must be between {low} and {high}")
    return value


#: The run spec key that opts a run into self-fencing (sent as Start.self_fence_after_ms).
SELF_FENCE_KEY = "self_fence_after_ms"


def self_fence_after_ms(spec: dict[str, object]) -> None:
    """``spec.self_fence_after_ms``, when given, is a whole number of milliseconds >= 0."""
    if SELF_FENCE_KEY not in spec:
        return
    value = spec[SELF_FENCE_KEY]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != int(value)
        or not 0 <= value <= 2**53
    ):
        raise InvalidArgument(f"spec.{SELF_FENCE_KEY} must be a whole number of ms >= 0")
