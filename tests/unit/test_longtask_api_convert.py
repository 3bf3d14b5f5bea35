"""The long-task API's mapping of the domain's vocabularies onto the protobuf enums (by
name: a value added to one side without the other fails here) and of display payloads
(stored JSON text <-> Struct; a damaged payload shows empty, never raises)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pytest
from google.protobuf import struct_pb2
from truerun.v1 import long_task_service_pb2 as pb

from kernel.errors import InvalidArgument
from longtasks.api.convert import enum_number, struct_of
from longtasks.api.drafts import json_text, step_draft
from longtasks.domain.states import CriterionResult, ProbeResult, SideEffect, StepState, TaskState


@pytest.mark.parametrize(
    ("enum", "proto", "prefix"),
    [
        (TaskState, pb.LongTaskState, "LONG_TASK_STATE"),
        (StepState, pb.StepState, "STEP_STATE"),
        (SideEffect, pb.SideEffectClass, "SIDE_EFFECT_CLASS"),
        (CriterionResult, pb.CriterionResult, "CRITERION_RESULT"),
    ],
)
def test_every_domain_value_has_its_proto_value_and_back(
    enum: type[StrEnum], proto: Any, prefix: str
) -> None:
    values = list(enum)
    numbers = {enum_number(proto, prefix, value) for value in values}
    assert 0 not in numbers and len(numbers) == len(values)
    assert numbers == set(proto.values()) - {0}


def test_probe_results_map_with_not_probed_as_unspecified() -> None:
    probed = [p for p in ProbeResult if p is not ProbeResult.NOT_PROBED]
    numbers = {enum_number(pb.ProbeResult, "PROBE_RESULT", p) for p in probed}
    assert numbers == {n for n in pb.ProbeResult.values() if n != 0}
    assert enum_number(pb.ProbeResult, "PROBE_RESULT", None) == 0


def test_display_payloads_round_trip_and_a_damaged_one_shows_empty() -> None:
    message = struct_pb2.Struct()
    message.update({"run": "make report", "receipt": "json", "n": 3, "x": [0.5, 2]})
    stored = json_text(message, "action")
    assert stored == '{"n":3,"receipt":"json","run":"make report","x":[0.5,2]}'
    assert struct_of(stored) == message
    for damaged in ("{not json", "[1, 2]", "", None, '"text"'):
        assert struct_of(damaged) is None


def test_a_step_without_a_side_effect_class_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="side_effect is required"):
        step_draft(pb.StepDraft(step_id="s", title="t"))
    big = pb.StepDraft(step_id="s", title="t", side_effect=pb.SIDE_EFFECT_CLASS_PURE)
    big.action.update({"run": "x" * 70_000})
    with pytest.raises(InvalidArgument, match="larger than"):
        step_draft(big)
