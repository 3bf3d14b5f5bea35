"""``uuid7`` formats its value itself (issue #16): still the canonical text of a UUIDv7."""

from __future__ import annotations

import uuid

from kernel.ids import uuid7


def test_uuid7_is_the_canonical_text_of_a_version_7_uuid_in_order() -> None:
    ids = [uuid7() for _ in range(2000)]
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
