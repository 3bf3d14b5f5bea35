"""redact's two shortcuts change no answer: an id of truerun's own shape (which skips the
secret patterns) is left as the full pass would leave it, and a remembered short text is
still cleaned of a secret registered after it was first seen. clean_payload's shortcut (no
encoding when a bound proves the payload under the cap) never lets a larger one through."""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.domain import redaction
from coordinator.domain.redaction import REDACTED, redact, register_secret
from kernel.ids import uuid7


def test_ids_of_truerun_shape_are_what_the_full_pass_leaves() -> None:
    ids = [str(uuid7()) for _ in range(500)] + [str(uuid.uuid4()) for _ in range(500)]
    for text in ids + [f"truerun-{i}" for i in ids]:
        assert redaction._ID_SHAPE.fullmatch(text)
        assert redaction._patterns(text) == text == redact(text)


def test_only_the_exact_id_shape_skips_the_patterns() -> None:
    key = "sk-" + "a" * 40
    for text in (f"truerun-{uuid7()} {key}", f"{key}-{uuid7()}", f"{uuid7()}token={key}"):
        assert not redaction._ID_SHAPE.fullmatch(text)
        assert key not in redact(text)


def test_a_remembered_text_loses_a_secret_registered_later() -> None:
    text = "deploy with hunter2hunter2 please"
    assert redact(text) == text  # remembered: nothing secret-shaped in it yet
    register_secret("hunter2hunter2")
    try:
        assert redact(text) == f"deploy with {REDACTED} please"
        assert redact(text) == f"deploy with {REDACTED} please"  # again, remembered or not
    finally:
        redaction._known.discard("hunter2hunter2")  # a process-wide set: leave it as found


_VALUES = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN, Infinity and -Infinity too: json writes them longer than repr
    st.text(max_size=400),  # any code point: escapes, surrogate pairs, control characters
)


@settings(max_examples=500, deadline=None, database=None)
@given(st.dictionaries(st.text(max_size=20), _VALUES, max_size=8))
def test_the_size_bound_is_never_below_the_encoded_size(payload: dict[str, Any]) -> None:
    bound = redaction._encoded_at_most(payload)
    assert len(json.dumps(payload, separators=(",", ":"))) <= bound
    # the default separators add a space after each colon and comma
    assert len(json.dumps(payload, ensure_ascii=False).encode()) <= bound + 2 * len(payload)
