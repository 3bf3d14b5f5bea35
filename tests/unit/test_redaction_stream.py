"""Issue #37: output redaction as a streaming transducer (coordinator/domain/output.py). For
every format of the corpus and every cut point of a line holding it (and three-way cuts),
no 8-character fragment of the secret is in what is stored, in the attempt row's held line
at any step, or in what a restarted coordinator (another seal key) stores instead."""

from __future__ import annotations

import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.domain import held_seal
from coordinator.domain.output import OutputPolicy, OutputState, finish, held_shown, take
from coordinator.domain.redaction_open import open_at
from tests.support.secret_corpus import FORMATS, secret_part

POLICY = OutputPolicy(max_bytes=1 << 20, note_interval_ms=60_000)
CASES = sorted(FORMATS.items())
FRAGMENT = 8


def fragments(value: str) -> set[str]:
    secret = secret_part(value)
    return {secret[i : i + FRAGMENT] for i in range(max(1, len(secret) - FRAGMENT + 1))}


def line_of(name: str, value: str) -> str:
    return f"step 3 ({name}): {value} -- done\n"


def run(chunks: list[str], keys: list[bytes] | None = None) -> tuple[str, list[str]]:
    """The stored text and every held column written on the way; ``keys[i]`` is the seal
    key of the coordinator that takes chunk i (a new one: a restart in between)."""
    state, stored, helds = OutputState(), "", []
    for i, chunk in enumerate(chunks):
        policy = POLICY if keys is None else OutputPolicy(POLICY.max_bytes, seal_key=keys[i])
        taken = take("a1", state, {"data": chunk}, policy, i)
        state = taken.state
        stored += "".join(p.text for p in taken.pieces)
        helds.append(state.held)
    ended = finish("a1", state, POLICY if keys is None else OutputPolicy(seal_key=keys[-1]))
    return stored + "".join(p.text for p in ended.pieces), helds


def leaks(value: str, *texts: str) -> list[str]:
    return sorted({f for f in fragments(value) for t in texts if f in t})


def test_the_corpus_has_at_least_thirty_formats() -> None:
    assert len(FORMATS) >= 30


@pytest.mark.parametrize(("name", "value"), CASES, ids=[n for n, _ in CASES])
def test_every_two_way_cut_stores_what_the_whole_line_stores(name: str, value: str) -> None:
    line = line_of(name, value)
    whole, _ = run([line])
    assert leaks(value, whole) == [] and whole.startswith(f"step 3 ({name}): ")
    assert whole.endswith(" -- done\n")
    failures = []
    for cut in range(1, len(line)):
        stored, helds = run([line[:cut], line[cut:]])
        if stored != whole or leaks(value, stored, *helds):
            failures.append((cut, stored, leaks(value, stored, *helds)))
    assert failures == [], failures[:3]


@pytest.mark.parametrize(("name", "value"), CASES, ids=[n for n, _ in CASES])
def test_a_restart_between_two_chunks_never_stores_the_secret(name: str, value: str) -> None:
    """The second chunk taken by a coordinator that cannot open the first one's seal (a
    restart, another replica): what it stores comes from the redacted fallback."""
    line = line_of(name, value)
    for cut in range(1, len(line)):
        stored, helds = run([line[:cut], line[cut:]], [held_seal.PROCESS_KEY, b"k" * 32])
        assert leaks(value, stored, *helds) == [], (cut, stored)
        assert stored.endswith("\n") and "\n" not in stored[:-1], (cut, stored)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(CASES),
    st.integers(min_value=1, max_value=200),
    st.integers(min_value=1, max_value=200),
    st.booleans(),
)
def test_three_way_cuts_never_leak(case: tuple[str, str], a: int, b: int, restart: bool) -> None:
    name, value = case
    line = line_of(name, value)
    first, second = sorted((a % len(line), b % len(line)))
    chunks = [c for c in (line[:first], line[first:second], line[second:]) if c]
    keys = [held_seal.PROCESS_KEY] * len(chunks)
    if restart:
        keys[-1] = secrets.token_bytes(32)
    stored, helds = run(chunks, keys)
    assert leaks(value, stored, *helds) == []
    if not restart:
        assert stored == run([line])[0]


def test_the_four_shapes_of_the_issue_are_redacted_whatever_the_cut() -> None:
    token = "A1b2C3d4E5f6G7h8I9j0K1l2"
    for line, secret in [
        (f"Authorization: Bearer {token}\n", token),
        ("Authorization: Basic dXNlcjpodW50ZXIy\n", "dXNlcjpodW50ZXIy"),
        (f"xoxb-123456789012-{token}\n", token),
        ('"password": "w1 w2 w3 w4"\n', "w1 w2 w3 w4"),
    ]:
        for cut in range(1, len(line)):
            stored, helds = run([line[:cut], line[cut:]])
            assert secret not in stored and "[redacted]" in stored, (line, cut, stored)
            assert not any(secret[:8] in h for h in helds), (line, cut, helds)


def test_a_harmless_held_line_is_kept_in_clear_and_shown() -> None:
    taken = take("a1", OutputState(), {"data": "done\nprogress 45%"}, POLICY, 0)
    assert taken.state.held == "progress 45%" and held_shown(taken.state.held) == "progress 45%"


def test_a_possible_secret_start_is_sealed_and_its_fallback_redacted() -> None:
    taken = take("a1", OutputState(), {"data": "Authorization: Bea"}, POLICY, 0)
    assert held_shown(taken.state.held) == "Authorization: [redacted]"
    assert "Bea" not in taken.state.held.partition(held_seal.MARK)[2]  # sealed, not clear


def test_a_forged_seal_mark_in_output_is_not_taken_for_one() -> None:
    forged = f"x{held_seal.MARK}s1.AAAA"
    stored, _ = run([forged, " tail\n"])
    assert held_seal.MARK not in stored and stored.endswith(" tail\n")


def test_seal_opens_only_with_its_key() -> None:
    key = secrets.token_bytes(32)
    sealed = held_seal.seal(key, "password=hunter2")
    assert held_seal.unseal(key, sealed) == "password=hunter2"
    assert held_seal.unseal(b"x" * 32, sealed) is None
    assert held_seal.unseal(key, sealed[:-2] + "AA") is None
    assert "hunter2" not in sealed


@pytest.mark.parametrize(
    "line",
    ["hello world", "progress 45%", "x = 5", "curl https://example.com/x", "pass", "AKI"],
)
def test_ordinary_line_ends_are_not_taken_for_open_secrets(line: str) -> None:
    assert open_at(line) is None


def test_a_long_line_cut_inside_a_possible_secret_stores_it_redacted() -> None:
    policy = OutputPolicy(max_held_chars=64)
    secret = "S3cr3tS3cr3tS3cr3t" * 8
    line = "x" * 100 + " password=" + secret
    state, stored = OutputState(), ""
    for at in range(0, len(line), 16):
        taken = take("a1", state, {"data": line[at : at + 16]}, policy, 0)
        state, stored = taken.state, stored + "".join(p.text for p in taken.pieces)
        assert "S3cr3tS3" not in state.held
    taken = take("a1", state, {"data": " more\nnext line\n"}, policy, 0)
    stored += "".join(p.text for p in taken.pieces)
    assert "S3cr3tS3" not in stored and stored.endswith("next line\n")
