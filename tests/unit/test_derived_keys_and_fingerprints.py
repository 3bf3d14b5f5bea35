"""The reserved key space (kernel/derived_keys.py) and a create's fingerprint
(coordinator/domain/fingerprints.py): issue #36, findings 4 and 5."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest

from automations.domain.model import fire_key
from coordinator.api import validation
from coordinator.domain import commands as c
from coordinator.domain.approvals import ApprovalPolicy
from coordinator.domain.fingerprints import NOT_ASKED, request_fingerprint
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType, ScopePolicy
from kernel import derived_keys
from kernel.errors import ReservedKey


def test_derived_keys_keep_the_formats_stored_runs_carry() -> None:
    # Runs created before the space was reserved keep finding their keys.
    assert fire_key("nightly", 1_700_000_000_000) == "schedule:nightly:1700000000000"
    assert derived_keys.schedule_manual("nightly", "r-1") == "schedule:nightly:manual:r-1"
    assert derived_keys.schedule_delivery("n", "d-1") == "schedule:n:delivery:d-1"
    assert derived_keys.long_task_attempt("T1", 3) == "long_task:T1:attempt:3"


def test_every_derived_key_is_refused_as_a_callers_key_or_request_id() -> None:
    keys = [
        fire_key("s", 1),
        derived_keys.schedule_manual("s", "x"),
        derived_keys.schedule_delivery("s", "d"),
        derived_keys.long_task_attempt("t", 1),
        *(derived_keys.derived_key(space, "anything") for space in derived_keys.Space),
    ]
    for key in keys:
        assert derived_keys.is_reserved(key)
        with pytest.raises(ReservedKey):
            validation.idempotency_key(key)
        with pytest.raises(ReservedKey):
            validation.request_id(key)


@pytest.mark.parametrize(
    "key", ["nightly-2026-11-29", "schedule", "Schedule:x:1", "my-schedule:1", "long_task", ""]
)
def test_keys_outside_the_reserved_space_pass(key: str) -> None:
    assert validation.idempotency_key(key) == (key or None)
    assert validation.request_id(key) == key


def _spec(**fields: Any) -> c.RunSpec:
    values: dict[str, Any] = {
        "project_id": "p",
        "owner_id": "o",
        "task_id": "t",
        "created_by": Actor(ActorType.USER, "ana"),
        "idempotency_key": "k",
    }
    values.update(fields)
    return c.RunSpec(**values)


#: A value other than the default for every covered field of RunSpec.
CHANGED: dict[str, Any] = {
    "project_id": "p2",
    "owner_id": "o2",
    "task_id": "t2",
    "task_revision": 3,
    "agent_id": "a",
    "execution_scope": "scope",
    "scope_policy": ScopePolicy.REJECT_NEW,
    "trigger_type": "cron",
    "trigger_id": "x",
    "priority": 5,
    "max_attempts": 3,
    "idempotent": True,
    "run_now": True,
    "requires_approval": True,
    "approval_policy": ApprovalPolicy(2, ("ops",), True, 60_000),
    "pinned_runtime_instance_id": "i-1",
    "required_labels": ("gpu",),
    "spec": {"command": "make"},
}


def test_every_runspec_field_is_covered_or_named_not_asked() -> None:
    # A field added to RunSpec must be decided: what the caller asks for (add it to CHANGED),
    # or not (NOT_ASKED in fingerprints.py).
    names = {f.name for f in dataclasses.fields(c.RunSpec)}
    undecided = names - set(CHANGED) - NOT_ASKED
    assert not undecided, f"RunSpec fields neither in CHANGED nor in NOT_ASKED: {undecided}"
    assert set(CHANGED) | NOT_ASKED <= names


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_each_covered_field_changes_the_fingerprint(name: str) -> None:
    assert request_fingerprint(_spec(**{name: CHANGED[name]})) != request_fingerprint(_spec())


def test_who_asked_the_key_and_the_trace_do_not_change_it() -> None:
    base = request_fingerprint(_spec())
    assert request_fingerprint(_spec(created_by=Actor(ActorType.API_APP, "ci"))) == base
    assert request_fingerprint(_spec(idempotency_key="other")) == base
    assert request_fingerprint(_spec(trace_parent="00-" + "1" * 32 + "-" + "2" * 16 + "-01")) == (
        base
    )


def test_the_fingerprint_is_stable_and_ignores_map_order() -> None:
    a = _spec(spec={"b": [1, {"y": 2, "x": 1}], "a": None})
    b = _spec(spec={"a": None, "b": [1, {"x": 1, "y": 2}]})
    assert request_fingerprint(a) == request_fingerprint(b)
    # The same value in any process, forever: pinned, so a change to the encoding (which
    # would refuse every stored key's retry) cannot go unnoticed. Fields at their default
    # are left out: a field added later with a default keeps every stored fingerprint.
    canonical = '{"owner_id":"o","project_id":"p","task_id":"t"}'
    assert request_fingerprint(_spec()) == hashlib.sha256(canonical.encode()).hexdigest()
    assert request_fingerprint(_spec()) == (
        "c6ccca8dd480cbccadd0803f2f12c044633d373c783057fa12af73c67675c50d"
    )
