"""The output store's pure rules (coordinator/domain/output.py): what is stored and noted for
each chunk, redaction across chunk boundaries, the cap and its marker, offsets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.domain.output import (
    ChunkKind,
    OutputPolicy,
    OutputState,
    Stored,
    finish,
    held_shown,
    take,
)
from tests.support.secret_corpus import FORMATS, secret_part

POLICY = OutputPolicy(max_bytes=1 << 20, note_interval_ms=60_000)
CORPUS = "".join(f"{name}: {value}\n" for name, value in FORMATS.items())


def _stream(
    chunks: list[str], policy: OutputPolicy = POLICY, *, step_ms: int = 1_000
) -> tuple[list[Stored], OutputState, list[dict[str, int]]]:
    state, offset = OutputState(), 0
    pieces: list[Stored] = []
    notes: list[dict[str, int] | None] = []
    for i, chunk in enumerate(chunks):
        taken = take("a1", state, {"data": chunk, "offset": offset}, policy, i * step_ms)
        offset += len(chunk.encode())
        state, pieces, notes = taken.state, [*pieces, *taken.pieces], [*notes, taken.note]
    ended = finish("a1", state, policy)
    return pieces + list(ended.pieces), ended.state, [n for n in notes if n is not None]


def _text(pieces: list[Stored]) -> str:
    return "".join(piece.text for piece in pieces)


def _fragments(value: str, size: int = 10) -> set[str]:
    secret = secret_part(value)
    return {secret[i : i + size] for i in range(max(1, len(secret) - size + 1))}


def _leaked(text: str) -> list[str]:
    return [name for name, value in FORMATS.items() if any(f in text for f in _fragments(value))]


def test_a_secret_cut_anywhere_between_two_chunks_is_stored_redacted() -> None:
    for name, value in FORMATS.items():
        line = f"{name}: {value}\n"
        for cut in range(1, len(line)):
            pieces, _, _ = _stream([line[:cut], line[cut:]])
            stored = _text(pieces)
            assert _leaked(stored) == [], (name, cut, stored)
            assert stored.startswith(f"{name}: "), (name, cut, stored)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(CORPUS) - 1), max_size=40))
def test_the_corpus_cut_into_any_chunks_is_stored_redacted_and_in_order(cuts: list[int]) -> None:
    bounds = sorted(set(cuts))
    chunks = [CORPUS[a:b] for a, b in zip([0, *bounds], [*bounds, len(CORPUS)], strict=True)]
    pieces, state, _ = _stream(chunks)
    stored = _text(pieces)
    assert _leaked(stored) == []
    assert all(f"{name}: " in stored for name in FORMATS)
    assert stored == _text(_stream([CORPUS])[0])  # the same text however it was cut
    offsets = [piece.offset for piece in pieces]
    sizes = [piece.size for piece in pieces]
    assert offsets == [sum(sizes[:i]) for i in range(len(pieces))]  # contiguous
    assert state.stored_bytes == sum(sizes) and state.log_bytes == len(CORPUS.encode())
    assert state.held == ""


def test_a_line_is_held_until_it_ends_and_what_is_held_is_redacted() -> None:
    state = OutputState()
    taken = take(
        "a1", state, {"data": "done\npartial sk_live_" + "A1b2C3d4E5f6G7h8I9j0"}, POLICY, 0
    )
    assert _text(list(taken.pieces)) == "done\n"
    # never the value, even while held: the row keeps the redacted form and the line sealed
    assert held_shown(taken.state.held) == "partial [redacted]"
    assert "A1b2C3d4" not in taken.state.held
    more = take("a1", taken.state, {"data": "K1l2M3 tail\n"}, POLICY, 1)
    assert _text(list(more.pieces)) == "partial [redacted] tail\n"


def test_a_private_key_block_across_chunks_is_swallowed_to_its_end() -> None:
    key = "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEow" * 40 + "\n-----END RSA PRIVATE KEY-----"
    text = f"before\n{key}\nafter\n"
    for cut in range(1, len(text), 7):
        stored = _text(_stream([text[:cut], text[cut:]])[0])
        assert "MIIEow" not in stored and "before\n" in stored and "after\n" in stored, cut


def test_notes_are_periodic_not_per_chunk() -> None:
    chunks = [f"line {i}\n" for i in range(1000)]
    _, _, notes = _stream(chunks, step_ms=100)  # 100 s of output, one chunk per 100 ms
    assert len(notes) == 2  # the first chunk, then 60 s later
    assert notes[0] == {"offset": len(chunks[0]), "log_bytes": len(chunks[0])}


def test_the_cap_stores_up_to_it_then_one_truncated_marker_and_nothing_after() -> None:
    policy = OutputPolicy(max_bytes=100, note_interval_ms=60_000)
    chunks = ["x" * 30 + "\n"] * 10
    pieces, state, _ = _stream(chunks, policy)
    kinds = [piece.kind for piece in pieces]
    assert kinds.count(ChunkKind.TRUNCATED) == 1 and kinds[-1] is ChunkKind.TRUNCATED
    text_bytes = sum(p.size for p in pieces if p.kind is ChunkKind.TEXT)
    assert text_bytes == 100 and state.truncated
    assert state.log_bytes == 310  # what arrived is still counted
    assert "cap of 100 bytes" in pieces[-1].text


def test_a_multibyte_character_is_never_cut_by_the_cap() -> None:
    policy = OutputPolicy(max_bytes=5, note_interval_ms=60_000)
    pieces, _, _ = _stream(["ééé\n"], policy)
    assert pieces[0].text == "éé" and pieces[1].kind is ChunkKind.TRUNCATED


def test_skipped_output_is_a_marker_and_the_held_line_is_stored_before_it() -> None:
    state = take("a1", OutputState(), {"data": "half a line", "offset": 0}, POLICY, 0).state
    taken = take("a1", state, {"skipped_bytes": 5000, "offset": 11}, POLICY, 1)
    assert [p.kind for p in taken.pieces] == [ChunkKind.TEXT, ChunkKind.SKIPPED]
    assert taken.pieces[0].text == "half a line" and "5000 bytes" in taken.pieces[1].text
    assert taken.state.log_bytes == 5011
