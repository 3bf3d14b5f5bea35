"""What a create asked for, as a short stable digest: an idempotency key reused with a
different request is told apart from a retry of the same one (docs/state-model.md
"6a. Idempotency keys and request ids").

Stripe and the IETF Idempotency-Key draft refuse a key sent again with another body; so does
truerun (IDEMPOTENCY_KEY_REUSED) rather than answer with the run another request created.
A keyed run keeps the fingerprint of the create that made it (``runs.request_fingerprint``);
a later create with the key compares its own with it, on the run it already reads to find
the key, so the check costs no round trip.

The fingerprint covers every field of ``RunSpec`` but those in ``NOT_ASKED``: who asked
(the token's actor, not a field of the request), the key itself and the trace context. A
field holding its default is left out, so a field added to ``RunSpec`` later (with a default)
leaves every stored fingerprint valid; tests/unit/test_derived_keys_and_fingerprints.py
fails until a new field is either covered or named in ``NOT_ASKED``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from enum import Enum
from typing import Any

from coordinator.domain.commands import RunSpec
from coordinator.domain.model import Run

#: RunSpec fields that are not what the caller asked for: the creator comes from the
#: credential (two tokens of one project sending the same request are one request), the
#: key is what is being compared under, and the traceparent differs on every retry.
NOT_ASKED = frozenset({"created_by", "idempotency_key", "trace_parent"})

_MISSING = object()


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return _MISSING  # required: always part of the fingerprint


#: (name, default) of each covered field, in declaration order.
_COVERED: tuple[tuple[str, Any], ...] = tuple(
    (f.name, _default(f)) for f in dataclasses.fields(RunSpec) if f.name not in NOT_ASKED
)


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"a RunSpec value of type {type(value).__name__} has no fingerprint form")


def request_fingerprint(spec: RunSpec) -> str:
    """The sha256 (hex) of the covered fields that differ from their defaults, as canonical
    JSON (sorted keys, no spaces): equal for equal requests, in any process, forever."""
    asked = {}
    for name, default in _COVERED:
        value = getattr(spec, name)
        if default is _MISSING or value != default:
            asked[name] = value
    text = json.dumps(asked, sort_keys=True, separators=(",", ":"), default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()


def same_request(run: Run, spec: RunSpec) -> bool:
    """Whether ``spec`` asks for what created ``run`` (the run holding its key). A run kept
    without a fingerprint (created before it was kept) matches any request, as every keyed
    create did before (its key keeps working)."""
    return run.request_fingerprint is None or run.request_fingerprint == request_fingerprint(spec)
