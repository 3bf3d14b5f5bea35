"""Bounds on a JSON-like value that a door accepts (docs/operations.md "Input bounds"):
nesting depth, encoded size, keys per object and items per array, string length.

Pure functions over plain data: ``first_violation`` names the first limit a value passes,
``nesting_depth`` measures raw JSON text without parsing it (so that a body nested 5,000
deep never reaches ``json.loads`` and its recursion), ``loads`` parses under the bounds.
Every walk here is iterative: a value deep enough to matter is exactly the one that would
overflow a recursive walk.

Why a depth bound at all: a stored spec is read back as a protobuf ``Struct``, and each JSON
level costs about three nested messages (Struct, map entry, Value), so past ~30 levels the
reader's protobuf decoder (upb, at most 100 nested messages) refuses the whole answer. The
depth setting is therefore capped at ``DEPTH_CEILING``, and readers render anything up to
``RENDER_DEPTH`` (the ceiling plus the few levels truerun wraps around a payload).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kernel.config import INPUT_DEPTH_CEILING, Settings
from kernel.errors import InputOutOfBounds, InputTooLarge

#: The highest TRUERUN_INPUT_MAX_DEPTH allowed: well under what a Struct can decode.
DEPTH_CEILING = INPUT_DEPTH_CEILING
#: What every reader renders: the ceiling plus the wrapping of a webhook payload
#: (spec.webhook.payload), still short of the decoder's limit (tests/unit/test_json_bounds.py).
RENDER_DEPTH = DEPTH_CEILING + 4

DEPTH = "depth"
BYTES = "bytes"
ITEMS = "items"
STRING = "string"

SETTINGS = {
    DEPTH: "TRUERUN_INPUT_MAX_DEPTH",
    BYTES: "TRUERUN_INPUT_MAX_BYTES",
    ITEMS: "TRUERUN_INPUT_MAX_ITEMS",
    STRING: "TRUERUN_INPUT_MAX_STRING",
}


@dataclass(frozen=True, slots=True)
class Bounds:
    """The limits (kernel/config.py input_max_*)."""

    max_depth: int = 16
    max_bytes: int = 64 * 1024
    max_items: int = 1_000
    max_string: int = 16 * 1024


DEFAULT_BOUNDS = Bounds()
_current = [DEFAULT_BOUNDS]


def from_settings(settings: Settings) -> Bounds:
    return Bounds(
        max_depth=settings.input_max_depth,
        max_bytes=settings.input_max_bytes,
        max_items=settings.input_max_items,
        max_string=settings.input_max_string,
    )


def configure(bounds: Bounds) -> None:
    """Set this process's bounds, once at start from its settings (services/cli/main.py):
    every door in the process judges by the same ones."""
    _current[0] = bounds


def current() -> Bounds:
    """The bounds every door of this process uses (the defaults until ``configure``)."""
    return _current[0]


@dataclass(frozen=True, slots=True)
class Violation:
    """The first limit a value passes: which, its setting, what is allowed, what was found,
    and where (a JSON path, ``$`` the value itself)."""

    limit: str
    allowed: int
    found: int
    where: str = "$"

    @property
    def setting(self) -> str:
        return SETTINGS[self.limit]

    def describe(self, what: str) -> str:
        words = {
            DEPTH: f"is nested {self.found} deep",
            BYTES: f"is {self.found} bytes encoded",
            ITEMS: f"holds {self.found} keys or items in one object or array",
            STRING: f"holds a string of {self.found} characters",
        }[self.limit]
        return (
            f"{what} {words} at {self.where}; at most {self.allowed} is accepted ({self.setting})"
        )


def nesting_depth(text: str | bytes) -> int:
    """How deep the brackets of raw JSON text nest, outside strings; no parsing, no
    recursion (a value whose text is not JSON still gets a number: the parser judges it)."""
    data = text.encode() if isinstance(text, str) else text
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):  # { [
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x7D, 0x5D):  # } ]
            depth -= 1
    return deepest


def _walk(value: object) -> Iterator[tuple[object, int, str]]:
    """Every value inside ``value`` with its depth (containers around it) and path."""
    stack: list[tuple[object, int, str]] = [(value, 0, "$")]
    while stack:
        item, depth, where = stack.pop()
        yield item, depth, where
        if isinstance(item, dict):
            for key, inner in item.items():
                stack.append((key, depth + 1, f"{where}.{key}"))
                stack.append((inner, depth + 1, f"{where}.{key}"))
        elif isinstance(item, list | tuple):
            for index, inner in enumerate(item):
                stack.append((inner, depth + 1, f"{where}[{index}]"))


def depth_of(value: object) -> int:
    """Containers nested in ``value``: 0 for a scalar, 1 for ``{"a": 1}``."""
    deepest = 0
    for item, depth, _ in _walk(value):
        if isinstance(item, dict | list | tuple):
            deepest = max(deepest, depth + 1)
    return deepest


def first_violation(value: object, bounds: Bounds = DEFAULT_BOUNDS) -> Violation | None:
    """The first bound ``value`` passes, or None: depth, then keys/items and strings, then
    the encoded size (measured only once the depth is known to be small)."""
    deepest = 0
    for item, depth, where in _walk(value):
        if isinstance(item, dict | list | tuple):
            level = depth + 1
            if level > bounds.max_depth:
                return Violation(DEPTH, bounds.max_depth, depth_of(value), where)
            deepest = max(deepest, level)
            if len(item) > bounds.max_items:
                return Violation(ITEMS, bounds.max_items, len(item), where)
        elif isinstance(item, str) and len(item) > bounds.max_string:
            return Violation(STRING, bounds.max_string, len(item), where)
    size = encoded_size(value)
    if size > bounds.max_bytes:
        return Violation(BYTES, bounds.max_bytes, size)
    return None


def encoded_size(value: object) -> int:
    """Bytes of the compact UTF-8 JSON encoding (call only on a value of bounded depth)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode())


def refusal(violation: Violation, what: str) -> InputOutOfBounds:
    """The error a door answers: INPUT_TOO_LARGE for the size, INPUT_OUT_OF_BOUNDS else;
    its metadata names the limit and the setting."""
    kind = InputTooLarge if violation.limit == BYTES else InputOutOfBounds
    return kind(
        violation.describe(what),
        limit=violation.limit,
        setting=violation.setting,
        allowed=str(violation.allowed),
        found=str(violation.found),
    )


def check(value: object, bounds: Bounds, what: str) -> None:
    """Raise the refusal when ``value`` passes a bound."""
    violation = first_violation(value, bounds)
    if violation is not None:
        raise refusal(violation, what)


def loads(body: str | bytes, bounds: Bounds, what: str) -> Any:
    """JSON text parsed under the bounds: the size and the depth are judged on the text
    first, so no parser ever recurses into a hostile body. ValueError for text that is not
    JSON (the caller decides what that means)."""
    size = len(body.encode() if isinstance(body, str) else body)
    if size > bounds.max_bytes:
        raise refusal(Violation(BYTES, bounds.max_bytes, size), what)
    depth = nesting_depth(body)
    if depth > bounds.max_depth:
        raise refusal(Violation(DEPTH, bounds.max_depth, depth), what)
    value = json.loads(body)
    check(value, bounds, what)
    return value


def renderable(value: object) -> Violation | None:
    """Why a stored value cannot be shown by a reader (None: it can): deeper than
    ``RENDER_DEPTH``. Rows written before the bounds existed may be."""
    deepest = depth_of(value)
    if deepest > RENDER_DEPTH:
        return Violation(DEPTH, RENDER_DEPTH, deepest)
    return None


#: The key of the note that stands in for a stored value no reader can render.
NOTE_KEY = "truerun_note"


def note(reason: str) -> dict[str, str]:
    """What readers show in place of a stored value they cannot render."""
    return {NOTE_KEY: f"this stored value cannot be shown: {reason}"}


def stored(text: str) -> Any:
    """A stored JSON text read back for the readers: one nested deeper than ``RENDER_DEPTH``
    (a row from before the bounds) is read as a note, never parsed, so no read of it, nor of
    any list it is in, fails. The brackets are counted first (in C): the byte scan runs only
    for a text that could be that deep."""
    if text.count("{") + text.count("[") > RENDER_DEPTH:
        depth = nesting_depth(text)
        if depth > RENDER_DEPTH:
            return note(f"it is nested {depth} deep, deeper than {RENDER_DEPTH}")
    return json.loads(text)
