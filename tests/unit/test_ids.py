"""``uuid7`` formats its value itself (issue #16): still the canonical text of a UUIDv7."""

from __future__ import annotations

import os
import string
import uuid

from kernel.ids import new_token, new_tokens, uuid7


def test_uuid7_is_the_canonical_text_of_a_version_7_uuid_in_order() -> None:
    ids = [uuid7() for _ in range(2000)]
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_a_forked_child_never_reuses_its_parents_random_bits() -> None:
    """Ids draw their random bits from a buffer (kernel/ids.py): a child forked with unread
    bytes in it must not make the ids its parent makes next."""
    uuid7()  # the buffer now holds unread bytes
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, " ".join(uuid7() for _ in range(20)).encode())
        os._exit(0)
    os.close(write)
    mine = [uuid7() for _ in range(20)]
    with os.fdopen(read) as pipe:
        theirs = pipe.read().split()
    os.waitpid(pid, 0)
    assert len(theirs) == 20
    assert {t[19:] for t in theirs}.isdisjoint(t[19:] for t in mine)  # the random tails


def test_new_tokens_are_new_tokens_drawn_together() -> None:
    """A claim round's tokens come from one read of the OS's randomness (kernel/ids.py):
    each is shaped as ``new_token`` makes it (the redactor and the hash depend on that) and
    all are distinct."""
    single = new_token()
    batch = new_tokens(64)
    assert len(batch) == 64 and len(set(batch)) == 64
    for token in [*batch, single]:
        kind, _, body = token.partition("_")
        assert kind == "trtcb" and len(body) == 32
        assert set(body) <= set(string.ascii_letters + string.digits + "-_")
    assert new_tokens(3, "ls")[0].startswith("trtls_") and new_tokens(0) == []
