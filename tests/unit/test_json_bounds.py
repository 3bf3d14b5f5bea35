"""kernel/json_bounds.py, exhaustively and by property: each bound names itself and its
setting; a depth is measured on the text without parsing (5,000 deep is no RecursionError);
anything the bounds let through, at the highest depth the settings allow, decodes as a
protobuf Struct inside a ListRunsResponse (the reader's answer), and every stored value
deeper than that reads as a note. The depth setting is capped. And kernel/loops.py: a
failing round or side task is logged and counted, never lost."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from truerun.v1 import common_pb2, run_service_pb2

from coordinator.api.convert import struct
from kernel import json_bounds as jb
from kernel import loops
from kernel.config import ConfigError, Settings
from kernel.errors import ErrorReason, InputOutOfBounds, InputTooLarge
from services.metrics import Metrics

BOUNDS = jb.Bounds(max_depth=4, max_bytes=200, max_items=5, max_string=10)


def nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "limit", "found"),
    [
        (nested(5), jb.DEPTH, 5),
        ([[[[["x"]]]]], jb.DEPTH, 5),
        ({"k": list(range(6))}, jb.ITEMS, 6),
        ({str(i): i for i in range(6)}, jb.ITEMS, 6),
        ({"k": "y" * 11}, jb.STRING, 11),
        ({"y" * 11: 1}, jb.STRING, 11),  # a key is a string too
        ({k: ["y" * 10] * 5 for k in "abcd"}, jb.BYTES, 0),
    ],
)
def test_each_bound_is_named_with_its_setting(value: object, limit: str, found: int) -> None:
    violation = jb.first_violation(value, BOUNDS)
    assert violation is not None and violation.limit == limit
    if limit != jb.BYTES:
        assert violation.found == found
    else:
        assert violation.found > BOUNDS.max_bytes
    assert violation.setting == f"TRUERUN_INPUT_MAX_{limit.upper()}"
    error = jb.refusal(violation, "spec")
    expected = ErrorReason.INPUT_TOO_LARGE if limit == jb.BYTES else ErrorReason.INPUT_OUT_OF_BOUNDS
    assert error.reason == expected
    assert error.metadata["limit"] == limit and error.metadata["setting"] == violation.setting
    assert error.message.startswith("spec ") and violation.setting in error.message


@pytest.mark.parametrize(
    "value", [None, 1, "x" * 10, nested(4), {"k": list(range(5))}, [1.5, True, None]]
)
def test_values_within_the_bounds_pass(value: object) -> None:
    assert jb.first_violation(value, BOUNDS) is None


def test_depth_is_measured_on_the_text_outside_strings_and_never_recurses() -> None:
    assert jb.nesting_depth(b'{"a":' * 60 + b"1" + b"}" * 60) == 60
    assert jb.nesting_depth('{"a": "{{{[[[", "b": [1, {"c": "\\"]]"}]}') == 3
    assert jb.nesting_depth(b"") == 0 and jb.nesting_depth("3") == 0
    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
    with pytest.raises(InputOutOfBounds) as refused:
        jb.loads(deep, jb.DEFAULT_BOUNDS, "the body")
    assert refused.value.metadata == {
        "limit": "depth",
        "setting": "TRUERUN_INPUT_MAX_DEPTH",
        "allowed": "16",
        "found": "5000",
    }
    assert jb.depth_of(json.loads(b"[" * 900 + b"]" * 900)) == 900  # iterative walk
    with pytest.raises(InputTooLarge):
        jb.loads(b'"' + b"y" * 300 + b'"', BOUNDS, "the body")
    with pytest.raises(ValueError):
        jb.loads(b"{not json", BOUNDS, "the body")


def test_stored_values_too_deep_to_render_read_as_a_note() -> None:
    assert jb.stored('{"a": [1, 2]}') == {"a": [1, 2]}
    assert jb.stored(json.dumps(nested(jb.RENDER_DEPTH))) == nested(jb.RENDER_DEPTH)
    noted = jb.stored('{"a":' * 5000 + "1" + "}" * 5000)
    assert list(noted) == [jb.NOTE_KEY] and "nested 5000 deep" in noted[jb.NOTE_KEY]
    assert list(jb.stored(json.dumps(nested(jb.RENDER_DEPTH + 1)))) == [jb.NOTE_KEY]


def _reads_back(spec: dict[str, Any]) -> dict[str, Any]:
    """The reader's answer: a Run in a ListRunsResponse, serialized and decoded again."""
    answer = run_service_pb2.ListRunsResponse(runs=[common_pb2.Run(spec=struct(spec))])
    decoded = run_service_pb2.ListRunsResponse.FromString(answer.SerializeToString())
    return dict(decoded.runs[0].spec)


def test_the_render_depth_decodes_and_deeper_rows_are_a_note_not_an_error() -> None:
    # objects cost the most levels (Struct, map entry, Value); lists fewer
    assert _reads_back(nested(jb.RENDER_DEPTH))  # type: ignore[arg-type]
    assert _reads_back({"a": json.loads("[" * jb.RENDER_DEPTH + "]" * jb.RENDER_DEPTH)})
    for depth in (jb.RENDER_DEPTH + 1, 60, 5000):
        shown = _reads_back(nested(depth))  # type: ignore[arg-type]
        assert list(shown) == [jb.NOTE_KEY]


JSON_LEAVES = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12)


def _json(max_leaves: int) -> st.SearchStrategy[object]:
    return st.recursive(
        JSON_LEAVES,
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4),
        max_leaves=max_leaves,
    )


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), _json(12))
def test_whatever_the_bounds_accept_at_the_ceiling_reads_back(depth: int, leaf: object) -> None:
    """Property: a value the highest allowed depth setting accepts, wrapped as a webhook
    payload is (spec.webhook.payload), always decodes in a reader's answer; a deeper one
    is refused at the door."""
    value = {"x": leaf}
    for _ in range(depth):
        value = {"a": value}
    ceiling = jb.Bounds(max_depth=jb.DEPTH_CEILING, max_bytes=10**7, max_items=10**4)
    violation = jb.first_violation(value, ceiling)
    if violation is None:
        spec = {"webhook": {"delivery_id": "d", "payload": value}}
        shown = _reads_back(spec)
        assert jb.NOTE_KEY not in shown and "webhook" in shown
    else:
        assert violation.limit == jb.DEPTH and jb.depth_of(value) > jb.DEPTH_CEILING


def test_the_depth_setting_is_capped_below_what_readers_decode() -> None:
    assert Settings.from_env({}).input_max_depth == 16
    assert Settings.from_env({"TRUERUN_INPUT_MAX_DEPTH": "24"}).input_max_depth == 24
    for bad in ("25", "100", "0"):
        with pytest.raises(ConfigError, match="TRUERUN_INPUT_MAX_DEPTH"):
            Settings.from_env({"TRUERUN_INPUT_MAX_DEPTH": bad})
    with pytest.raises(ConfigError, match="TRUERUN_INPUT_MAX_ITEMS"):
        Settings.from_env({"TRUERUN_INPUT_MAX_ITEMS": "0"})
    made = jb.from_settings(Settings.from_env({"TRUERUN_INPUT_MAX_STRING": "99"}))
    assert made == jb.Bounds(max_string=99)


async def test_a_failing_round_or_side_task_is_logged_counted_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rounds = 0

    async def round_() -> None:
        nonlocal rounds
        rounds += 1
        if rounds <= 2:
            raise RuntimeError("a hiccup")
        if rounds == 4:
            raise asyncio.CancelledError

    before = loops.FAILURES["unit round"]
    with pytest.raises(asyncio.CancelledError):
        await loops.every(0, round_, "unit round")
    assert rounds == 4 and loops.FAILURES["unit round"] == before + 2

    async def dies() -> None:
        raise ValueError("one bad start")

    task = asyncio.get_running_loop().create_task(dies())
    loops.supervise(task, "unit side task")
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)  # the done callback runs
    assert loops.FAILURES["unit side task"] == 1
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any("unit side task failed" in r.getMessage() for r in logged)
    exported = generate_latest(Metrics(parts=()).registry).decode()
    assert 'truerun_loop_failure_total{loop="unit side task"} 1.0' in exported
