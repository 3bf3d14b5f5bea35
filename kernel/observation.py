"""A runtime's capacity observation, its validation and its stored encoding (seed A §2).

An observation is what one runtime install (owner_id + runtime_instance_id, the capacity
domain) says about itself in a heartbeat: the routes Start can use, the device limit D, the
tasks it runs now and how many wait in its own queue. ``active`` must match the unique,
non-empty ``active_task_ids`` one to one; anything inconsistent is rejected, never repaired.

Times are integer milliseconds. ``observed_at_ms`` is the runtime's clock and informational
only; ``received_at_ms`` is the server's clock and the only base of freshness.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kernel.errors import DomainError, ErrorReason

#: Version of the stored JSON layout; a value with another version is treated as corrupt.
FORMAT_VERSION: Final = 1
#: The longest agent_version or lineage an observation may carry.
MAX_HELLO_FACT: Final = 128


class ObservationRejected(DomainError):
    """An inconsistent observation (INVALID_ARGUMENT); metadata["field"] names the field."""

    reason = ErrorReason.OBSERVATION_REJECTED


@dataclass(frozen=True, slots=True)
class Route:
    """One way Start reaches the runtime. A transport route, not a capacity identity."""

    device_id: str
    kind: str


@dataclass(frozen=True, slots=True)
class Observation:
    """One capacity observation of a runtime instance."""

    owner_id: str
    runtime_instance_id: str
    routes: tuple[Route, ...]
    #: D, the device concurrency limit.
    limit: int
    active: int
    active_task_ids: tuple[str, ...]
    queued: int
    labels: tuple[str, ...]
    #: The runtime's clock; None when it sent none. Informational only.
    observed_at_ms: int | None
    #: The server's clock when the observation arrived; freshness counts from here.
    received_at_ms: int
    #: The tasks waiting in the runtime's own queue (accepted, not yet running); empty
    #: when the runtime does not list them (then it vouches for none of them).
    queued_task_ids: tuple[str, ...] = ()
    #: The runtime's software version and lineage from its stream's Hello (the coordinator
    #: stamps them; informational, for the Runtimes page); "" when not known.
    agent_version: str = ""
    lineage: str = ""


def _blank(value: str) -> bool:
    return not value.strip()


def _reject(field: str, message: str) -> ObservationRejected:
    return ObservationRejected(message, field=field)


def validate(obs: Observation) -> None:
    """Raise ObservationRejected unless ``obs`` is complete and self-consistent.

    Rules: owner_id and runtime_instance_id are non-blank; limit, active and queued are
    >= 0; every active task id is non-blank and appears once; active equals the number of
    active task ids; queued task ids, when listed, are non-blank, each once, none of them
    active, and as many as queued; agent_version and lineage are at most 128 printable
    characters; there is at least one route, every route has a non-blank
    device_id and no device_id appears twice.
    """
    if _blank(obs.owner_id):
        raise _reject("owner_id", "observation has no owner_id")
    if _blank(obs.runtime_instance_id):
        raise _reject("runtime_instance_id", "observation has no runtime_instance_id")
    for field, value in (("limit", obs.limit), ("active", obs.active), ("queued", obs.queued)):
        if value < 0:
            raise _reject(field, f"observation {field} is negative ({value})")
    if any(_blank(task_id) for task_id in obs.active_task_ids):
        raise _reject("active_task_ids", "observation has an empty active task id")
    unique = set(obs.active_task_ids)
    if len(unique) != len(obs.active_task_ids):
        raise _reject("active_task_ids", "observation repeats an active task id")
    if obs.active != len(unique):
        raise _reject(
            "active",
            f"observation active={obs.active} but lists {len(unique)} active task id(s)",
        )
    if obs.queued_task_ids:
        if any(_blank(task_id) for task_id in obs.queued_task_ids):
            raise _reject("queued_task_ids", "observation has an empty queued task id")
        queued = set(obs.queued_task_ids)
        if len(queued) != len(obs.queued_task_ids) or queued & unique:
            raise _reject("queued_task_ids", "observation lists a queued task id twice")
        if obs.queued != len(queued):
            raise _reject(
                "queued",
                f"observation queued={obs.queued} but lists {len(queued)} queued task id(s)",
            )
    for fact, said in (("agent_version", obs.agent_version), ("lineage", obs.lineage)):
        if len(said) > MAX_HELLO_FACT or not said.isprintable():
            raise _reject(
                fact, f"observation {fact} is not 0-{MAX_HELLO_FACT} printable characters"
            )
    if not obs.routes:
        raise _reject("routes", "observation has no routes")
    if any(_blank(route.device_id) for route in obs.routes):
        raise _reject("routes", "observation has a route without device_id")
    device_ids = [route.device_id for route in obs.routes]
    if len(set(device_ids)) != len(device_ids):
        raise _reject("routes", "observation repeats a route device_id")


def is_fresh(obs: Observation, ttl_ms: int, now_ms: int) -> bool:
    """Whether ``obs``, stored with ``ttl_ms``, still counts at ``now_ms`` (server clock)."""
    return now_ms - obs.received_at_ms <= ttl_ms


# --- stored encoding (shared by every store, so the twins read and write alike) ---------


def encode(obs: Observation, ttl_ms: int) -> str:
    """Compact JSON of ``obs`` with the TTL it was stored with."""
    document: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "owner_id": obs.owner_id,
        "runtime_instance_id": obs.runtime_instance_id,
        "routes": [{"device_id": r.device_id, "kind": r.kind} for r in obs.routes],
        "limit": obs.limit,
        "active": obs.active,
        "active_task_ids": list(obs.active_task_ids),
        "queued": obs.queued,
        "queued_task_ids": list(obs.queued_task_ids),
        "labels": list(obs.labels),
        "observed_at_ms": obs.observed_at_ms,
        "received_at_ms": obs.received_at_ms,
        "ttl_ms": ttl_ms,
        "agent_version": obs.agent_version,
        "lineage": obs.lineage,
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


class CorruptObservation(ValueError):
    """A stored value that is not a valid encoded observation."""


def _int(document: Mapping[str, Any], key: str) -> int:
    value = document.get(key)
    if type(value) is not int:  # bool is an int subclass: refuse it too
        raise CorruptObservation(f"{key} is not an integer")
    return value


def _str(document: Mapping[str, Any], key: str) -> str:
    value = document.get(key)
    if not isinstance(value, str):
        raise CorruptObservation(f"{key} is not a string")
    return value


def _strs(document: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = document.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CorruptObservation(f"{key} is not a list of strings")
    return tuple(value)


def _routes(document: Mapping[str, Any]) -> tuple[Route, ...]:
    value = document.get("routes")
    if not isinstance(value, list):
        raise CorruptObservation("routes is not a list")
    routes: list[Route] = []
    for item in value:
        if not isinstance(item, dict):
            raise CorruptObservation("a route is not an object")
        routes.append(Route(device_id=_str(item, "device_id"), kind=_str(item, "kind")))
    return tuple(routes)


def decode(raw: str | bytes) -> tuple[Observation, int]:
    """``(observation, ttl_ms)`` from ``encode``'s output; validates again.

    Raises CorruptObservation for anything else: bytes that are not UTF-8, invalid JSON,
    another format version, missing or mistyped fields, a non-positive ttl_ms, or an
    observation ``validate`` rejects.
    """
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # incl. UnicodeDecodeError, JSONDecodeError
        raise CorruptObservation(f"not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise CorruptObservation("not a JSON object")
    if document.get("v") != FORMAT_VERSION or type(document.get("v")) is not int:
        raise CorruptObservation(f"unknown format version {document.get('v')!r}")
    observed = document.get("observed_at_ms")
    if observed is not None and type(observed) is not int:
        raise CorruptObservation("observed_at_ms is not an integer")
    obs = Observation(
        owner_id=_str(document, "owner_id"),
        runtime_instance_id=_str(document, "runtime_instance_id"),
        routes=_routes(document),
        limit=_int(document, "limit"),
        active=_int(document, "active"),
        active_task_ids=_strs(document, "active_task_ids"),
        queued=_int(document, "queued"),
        labels=_strs(document, "labels"),
        observed_at_ms=observed,
        received_at_ms=_int(document, "received_at_ms"),
        # absent in values stored before the field existed: none listed
        queued_task_ids=_strs(document, "queued_task_ids") if "queued_task_ids" in document else (),
        # absent in values stored before the Hello facts were kept: not known
        agent_version=_str(document, "agent_version") if "agent_version" in document else "",
        lineage=_str(document, "lineage") if "lineage" in document else "",
    )
    ttl_ms = _int(document, "ttl_ms")
    if ttl_ms <= 0:
        raise CorruptObservation(f"ttl_ms is not positive ({ttl_ms})")
    try:
        validate(obs)
    except ObservationRejected as exc:
        raise CorruptObservation(f"invalid observation: {exc.message}") from exc
    return obs, ttl_ms
