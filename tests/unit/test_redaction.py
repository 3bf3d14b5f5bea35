"""Redaction of secret-looking values and the event payload allow-list (seed B §17)."""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.domain import commands as c
from coordinator.domain.decide import Context, decide
from coordinator.domain.model import Actor, Attempt, Run, runtime_task_id_for
from coordinator.domain.redaction import (
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_STRING,
    MAX_SUMMARY_CHARS,
    PAYLOAD_KEYS,
    REDACTED,
    clean_payload,
    redact,
    summary,
)
from coordinator.domain.states import (
    ActorType,
    AttemptStatus,
    ObservedState,
    RunStatus,
    ScopePolicy,
    SyncState,
)

PEM: Final = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)

# (text, the secret that must disappear, text that must survive)
SECRETS: Final = [
    ("password=hunter2", "hunter2", "password="),
    ("PGPASSWORD=s3cr3t-Pa55 psql -h db", "s3cr3t-Pa55", "psql -h db"),
    ("db_password = 'correct horse battery'", "correct horse", "db_password = "),
    ("token: abc123def456", "abc123def456", "token: "),
    ("GITHUB_TOKEN=ghs_notreallyatoken", "notreallyatoken", "GITHUB_TOKEN="),
    ("api_key=live_1234567890abcdef", "live_1234567890abcdef", "api_key="),
    ("x-api-key: AbCdEf0123456789", "AbCdEf0123456789", "x-api-key: "),
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "wJalrXUtnFEMI", "export "),
    ('client_secret="two words"', "two words", "client_secret="),
    ("credentials: user:pw-9f8e7d", "user:pw-9f8e7d", "credentials: "),
    (
        "sent Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig to api",
        "eyJhbGciOiJIUzI1NiJ9",
        " to api",
    ),
    ("basic dXNlcjpwYXNzd29yZA== rejected", "dXNlcjpwYXNzd29yZA==", " rejected"),
    ("aws key AKIAIOSFODNN7EXAMPLE leaked", "AKIAIOSFODNN7EXAMPLE", "aws key "),
    (
        "clone with ghp_1234567890abcdefghijABCDEFGHIJ failed",
        "ghp_1234567890abcdefghij",
        "clone with ",
    ),
    (
        "fine-grained github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "11ABCDEFG0123456789",
        "fine-grained ",
    ),
    ("openai sk-proj-abcdefghijklmnopqrstuvwx rejected", "abcdefghijklmnopqrstuvwx", " rejected"),
    ("slack xoxb-1234567890-abcdefghij", "1234567890-abcdefghij", "slack "),
    (
        "connect postgres://app:Sup3rS3cret@db.internal:5432/prod failed",
        "Sup3rS3cret",
        "@db.internal:5432/prod failed",
    ),
    ("GET https://user:pa55word@example.com/x", "pa55word", "https://user:"),
    (
        f"key follows\n{PEM}\nafter the key",
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgO",
        "after the key",
    ),
    (
        "truncated -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
        "b3BlbnNz",
        "truncated ",
    ),
]


@pytest.mark.parametrize(("text", "secret", "kept"), SECRETS, ids=[s[0][:32] for s in SECRETS])
def test_secrets_are_redacted_and_the_context_survives(text: str, secret: str, kept: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned
    assert kept in cleaned


ORDINARY: Final = [
    "process exited with code 1",
    "connection refused: db.internal:5432",
    "the authentication step failed after 3 retries",
    "tokenizer loaded 32000 entries",
    "see https://example.com/docs/errors#E42 for details",
    "postgres://db.internal:5432/prod is unreachable",
    "ModuleNotFoundError: No module named 'requests'",
    "task-1234 risk-assessment-for-the-quarter done",
    "AKIA is a prefix; AKIA123 is too short",
    "sk-short and ghp_short are not tokens",
    "Bearer of bad news",
    "日本語のエラー: ファイルが見つかりません",
    "",
]


@pytest.mark.parametrize("text", ORDINARY, ids=[t[:24] or "empty" for t in ORDINARY])
def test_ordinary_text_survives(text: str) -> None:
    assert redact(text) == text
    assert summary(text) == text


@pytest.mark.parametrize("text", [s[0] for s in SECRETS], ids=[s[0][:32] for s in SECRETS])
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


LEAKS: Final = [
    ("Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"),
    ('curl -H "Authorization: Basic dXNlcjpwYXNzd29yZA=="', "dXNlcjpwYXNzd29yZA=="),
    ('{"password": "hunter2"}', "hunter2"),
    ("{'api_key': 'live_1234567890abcdef'}", "live_1234567890abcdef"),
    ("redis://:s3cretpw@cache:6379/0", "s3cretpw"),
]


@pytest.mark.parametrize(("text", "secret"), LEAKS, ids=[t[:28] for t, _ in LEAKS])
def test_common_secret_forms_that_leak(text: str, secret: str) -> None:
    assert secret not in redact(text)


# -- summaries --------------------------------------------------------------------------------


def test_summary_of_nothing_is_nothing() -> None:
    assert summary(None) is None


def test_summary_is_bounded() -> None:
    cleaned = summary("x" * (MAX_SUMMARY_CHARS * 3))
    assert cleaned is not None and len(cleaned) == MAX_SUMMARY_CHARS and cleaned.endswith("…")
    assert summary("y" * MAX_SUMMARY_CHARS) == "y" * MAX_SUMMARY_CHARS


def test_summary_redacts_before_it_truncates() -> None:
    """A secret cut in half by the bound must not leave its first half behind."""
    text = "x " * ((MAX_SUMMARY_CHARS - 12) // 2) + "password=hunter2hunter2hunter2"
    cleaned = summary(text)
    assert cleaned is not None and "hunt" not in cleaned


# -- payloads ---------------------------------------------------------------------------------


def test_unknown_keys_none_values_and_nested_values_are_dropped() -> None:
    payload = {
        "reason": "worker_lost",
        "exit_code": 137,
        "cancel_requested": True,
        "prompt": "write me a poem",
        "stdout": "lots of logs",
        "env": {"HOME": "/root"},
        "seq": None,
        "error_code": ["not", "scalar"],
        "outcome": 1.5,
    }
    assert clean_payload(payload) == {
        "reason": "worker_lost",
        "exit_code": 137,
        "cancel_requested": True,
        "outcome": 1.5,
    }


def test_payload_strings_are_redacted_and_bounded() -> None:
    cleaned = clean_payload({"error_summary": "login failed password=hunter2 " + "z" * 2000})
    value = cleaned["error_summary"]
    assert "hunter2" not in value and REDACTED in value
    assert len(value) == MAX_PAYLOAD_STRING


def _size(payload: dict[str, Any]) -> int:
    return len(json.dumps(payload, separators=(",", ":")))


def test_payload_is_capped_by_dropping_the_longest_values() -> None:
    payload: dict[str, Any] = {key: "v" * 1000 for key in PAYLOAD_KEYS}
    payload["reason"] = "short"
    payload["seq"] = 7
    cleaned = clean_payload(payload)
    assert _size(cleaned) <= MAX_PAYLOAD_BYTES
    assert cleaned["reason"] == "short" and cleaned["seq"] == 7


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=3000),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=200, deadline=None, database=None)
@given(st.dictionaries(st.sampled_from(sorted(PAYLOAD_KEYS)) | st.text(max_size=12), _scalars))
def test_any_payload_comes_out_allow_listed_and_small(payload: dict[str, Any]) -> None:
    cleaned = clean_payload(payload)
    assert set(cleaned) <= PAYLOAD_KEYS & set(payload)
    assert all(isinstance(v, bool | int | float | str) for v in cleaned.values())
    assert all(len(v) <= MAX_PAYLOAD_STRING for v in cleaned.values() if isinstance(v, str))
    assert _size(cleaned) <= MAX_PAYLOAD_BYTES
    assert len(json.dumps(cleaned, ensure_ascii=False).encode()) <= MAX_PAYLOAD_BYTES


_WORDS = st.sampled_from(
    [
        "build",
        "failed",
        "at",
        "step",
        "3:",
        "retry",
        "exit",
        "1",
        "ok",
        "ERROR",
        "host",
        "db.internal",
        "(see",
        "log)",
        "—",
        "完了",
    ]
)
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_ALNUM_16 = st.text(_ALNUM, min_size=16, max_size=40)
# (text to embed, the part of it that must disappear)
_SECRET_VALUES = st.one_of(
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=16, max_size=16).map(
        lambda s: ("AKIA" + s, "AKIA" + s)
    ),
    _ALNUM_16.map(lambda s: ("ghp_" + s + "abcd", s)),
    _ALNUM_16.map(lambda s: ("sk-" + s, s)),
    _ALNUM_16.map(lambda s: ("password=" + s, s)),
    _ALNUM_16.map(lambda s: ("Bearer " + s, s)),
    _ALNUM_16.map(lambda s: ("https://bob:" + s + "@h/x", s)),
)


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(_WORDS, max_size=12), st.lists(_WORDS, max_size=12), _SECRET_VALUES)
def test_secrets_inside_ordinary_text_never_survive(
    before: list[str], after: list[str], secret: tuple[str, str]
) -> None:
    embedded, core = secret
    cleaned = summary(" ".join([*before, embedded, *after]))
    assert cleaned is not None and core not in cleaned
    assert " ".join(before) in cleaned and " ".join(after) in cleaned


# -- through the transition function ------------------------------------------------------------


def test_event_payloads_from_decide_are_redacted_and_capped() -> None:
    attempt = Attempt(
        id="att-1",
        run_id="run-1",
        attempt_no=1,
        previous_attempt_id=None,
        owner_id="o",
        agent_id=None,
        execution_scope=None,
        runtime_task_id=runtime_task_id_for("att-1"),
        status=AttemptStatus.RUNNING,
        observed_state=ObservedState.RUNNING,
        sync_state=SyncState.IN_SYNC,
        created_at_ms=0,
        updated_at_ms=0,
        start_requested_at_ms=1,
        last_event_seq=2,
    )
    run = Run(
        id="run-1",
        project_id="p",
        owner_id="o",
        task_id="t",
        task_revision=0,
        agent_id=None,
        execution_scope=None,
        scope_policy=ScopePolicy.QUEUE,
        trigger_type="api",
        trigger_id=None,
        idempotency_key=None,
        retry_of_run_id=None,
        priority=0,
        max_attempts=1,
        idempotent=False,
        run_now=False,
        pinned_runtime_instance_id=None,
        required_labels=(),
        spec={},
        status=RunStatus.RUNNING,
        version=4,
        event_sequence=6,
        current_attempt_id="att-1",
        attempt_count=1,
        created_by="u",
        created_at_ms=0,
        updated_at_ms=0,
    )
    cmd = c.RuntimeResult(
        "run-1",
        "att-1",
        attempt.runtime_task_id,
        3,
        Actor(ActorType.RUNTIME, "inst-1"),
        outcome=c.RuntimeOutcome.FAILED,
        exit_code=1,
        error_code="E" * 5000,
        error_summary="token: abcdef123456 " + "trace " * 2000,
    )
    ctx = Context(now_ms=10, new_id=lambda: "id", new_token=lambda: "tok")
    decision = decide(cmd, run, attempt, ctx)
    assert decision.events
    for event in decision.events:
        assert _size(event.payload) <= MAX_PAYLOAD_BYTES
        assert "abcdef123456" not in json.dumps(event.payload)
        assert set(event.payload) <= PAYLOAD_KEYS
    assert decision.run.error_summary is not None
    assert len(decision.run.error_summary) <= MAX_SUMMARY_CHARS
