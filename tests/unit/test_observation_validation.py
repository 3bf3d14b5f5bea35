"""Every rule of capacity.observations.validate (seed A §2), and the stored encoding."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from capacity.observations import (
    CorruptObservation,
    Observation,
    ObservationRejected,
    Route,
    decode,
    encode,
    is_fresh,
    validate,
)
from kernel.errors import DomainError, ErrorReason


def observation(**changes: Any) -> Observation:
    base = Observation(
        owner_id="owner-1",
        runtime_instance_id="inst-1",
        routes=(Route("dev-local", "local"), Route("dev-sock", "socket")),
        limit=3,
        active=2,
        active_task_ids=("task-a", "task-b"),
        queued=1,
        labels=("gpu",),
        observed_at_ms=1_000,
        received_at_ms=2_000,
    )
    return dataclasses.replace(base, **changes)


def test_a_valid_observation_passes() -> None:
    validate(observation())


@pytest.mark.parametrize(
    "changes",
    [
        {"limit": 0, "active": 0, "active_task_ids": (), "queued": 0},
        {"labels": (), "observed_at_ms": None},
        {"routes": (Route("dev", ""),)},
        {"limit": 1, "active": 2},  # over the limit is a fact to report, not an error
    ],
    ids=["all-zero", "no-labels-no-runtime-clock", "one-route-no-kind", "active-above-limit"],
)
def test_edge_cases_that_are_valid(changes: dict[str, Any]) -> None:
    validate(observation(**changes))


REJECTIONS: list[tuple[str, dict[str, Any], str]] = [
    ("empty-owner", {"owner_id": ""}, "owner_id"),
    ("blank-owner", {"owner_id": "  "}, "owner_id"),
    ("empty-instance", {"runtime_instance_id": ""}, "runtime_instance_id"),
    ("blank-instance", {"runtime_instance_id": "\t"}, "runtime_instance_id"),
    ("negative-limit", {"limit": -1}, "limit"),
    ("negative-active", {"active": -1, "active_task_ids": ()}, "active"),
    ("negative-queued", {"queued": -1}, "queued"),
    ("empty-task-id", {"active": 2, "active_task_ids": ("task-a", "")}, "active_task_ids"),
    ("blank-task-id", {"active": 1, "active_task_ids": (" ",)}, "active_task_ids"),
    ("duplicate-task-id", {"active": 2, "active_task_ids": ("t", "t")}, "active_task_ids"),
    ("duplicate-counted-once", {"active": 1, "active_task_ids": ("t", "t")}, "active_task_ids"),
    ("active-above-ids", {"active": 3}, "active"),
    ("active-below-ids", {"active": 1}, "active"),
    ("active-without-ids", {"active": 1, "active_task_ids": ()}, "active"),
    ("ids-without-active", {"active": 0}, "active"),
    ("no-routes", {"routes": ()}, "routes"),
    ("empty-route-device", {"routes": (Route("", "local"),)}, "routes"),
    (
        "duplicate-route-device",
        {"routes": (Route("dev", "local"), Route("dev", "socket"))},
        "routes",
    ),
]


@pytest.mark.parametrize(
    ("changes", "field"),
    [(changes, field) for _, changes, field in REJECTIONS],
    ids=[name for name, _, _ in REJECTIONS],
)
def test_rejections(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ObservationRejected) as info:
        validate(observation(**changes))
    assert info.value.reason is ErrorReason.OBSERVATION_REJECTED
    assert info.value.metadata == {"field": field}
    assert isinstance(info.value, DomainError)


def test_freshness_counts_from_the_receive_time() -> None:
    obs = observation(received_at_ms=10_000, observed_at_ms=999_999_999)
    assert is_fresh(obs, 500, 10_000)
    assert is_fresh(obs, 500, 10_500)
    assert not is_fresh(obs, 500, 10_501)


def test_encoding_round_trips_and_is_compact() -> None:
    for obs in (observation(), observation(observed_at_ms=None, labels=())):
        raw = encode(obs, 1_500)
        assert " " not in raw
        assert '"ttl_ms":1500' in raw
        assert f'"received_at_ms":{obs.received_at_ms}' in raw
        assert decode(raw) == (obs, 1_500)
        assert decode(raw.encode()) == (obs, 1_500)


def mutated(old: str, new: str) -> str:
    """A valid encoding with one fragment replaced (the fragment must be present)."""
    raw = encode(observation(), 1_000)
    assert raw.count(old) == 1, old
    return raw.replace(old, new)


CORRUPT: dict[str, str | bytes] = {
    "not-utf8": b"\xff\xfe\x00garbage",
    "not-json": "not json",
    "empty": "",
    "array": "[]",
    "empty-object": "{}",
    "other-version": mutated('"v":1', '"v":2'),
    "bool-version": mutated('"v":1', '"v":true'),
    "string-int": mutated('"limit":3', '"limit":"3"'),
    "bool-int": mutated('"limit":3', '"limit":true'),
    "float-int": mutated('"limit":3', '"limit":3.0'),
    "string-observed-at": mutated('"observed_at_ms":1000', '"observed_at_ms":"x"'),
    "zero-ttl": mutated('"ttl_ms":1000', '"ttl_ms":0'),
    "no-ttl": mutated(',"ttl_ms":1000', ""),
    "no-received-at": mutated('"received_at_ms":2000,', ""),
    "invalid-observation": mutated('"active":2', '"active":5'),
    "labels-not-list": mutated('"labels":["gpu"]', '"labels":"gpu"'),
    "route-not-object": mutated('{"device_id":"dev-local","kind":"local"}', "1"),
    "route-without-kind": mutated('"kind":"local"', '"k":"local"'),
}


@pytest.mark.parametrize("raw", list(CORRUPT.values()), ids=list(CORRUPT))
def test_corrupt_values_do_not_decode(raw: str | bytes) -> None:
    with pytest.raises(CorruptObservation):
        decode(raw)
