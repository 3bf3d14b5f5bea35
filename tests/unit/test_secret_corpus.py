"""Issue #11 §4: every credential format of the corpus (tests/support/secret_corpus.py) is
redacted from text, from event payloads, from log records, and refused in a run spec."""

from __future__ import annotations

import logging
import sys

import pytest

from coordinator.api import validation
from coordinator.domain.redaction import (
    REDACTED,
    RedactingFilter,
    clean_payload,
    redact,
    register_secret,
    summary,
)
from kernel.errors import InvalidArgument
from tests.support.secret_corpus import FORMATS, secret_part

CASES = sorted(FORMATS.items())


def test_the_corpus_has_at_least_twenty_real_world_formats() -> None:
    assert len([n for n in FORMATS if not n.startswith("truerun")]) >= 20


@pytest.mark.parametrize(("name", "value"), CASES, ids=[n for n, _ in CASES])
def test_each_format_is_redacted_and_the_words_around_it_survive(name: str, value: str) -> None:
    text = f"deploy failed: got {value} from the vault"
    for cleaned in (redact(text), summary(text) or "", str(clean_payload({"data": text}))):
        assert secret_part(value) not in cleaned, (name, cleaned)
        assert REDACTED in cleaned and "deploy failed" in cleaned and "from the vault" in cleaned


@pytest.mark.parametrize(("name", "value"), CASES, ids=[n for n, _ in CASES])
def test_each_format_is_redacted_from_log_records(name: str, value: str) -> None:
    record = logging.LogRecord(
        "t", logging.WARNING, __file__, 1, "token %s refused", (value,), None
    )
    RedactingFilter().filter(record)
    assert secret_part(value) not in record.getMessage()
    try:
        raise RuntimeError(f"connect with {value}")
    except RuntimeError:
        failed = logging.LogRecord("t", logging.ERROR, __file__, 1, "boom", None, sys.exc_info())
    RedactingFilter().filter(failed)
    assert failed.exc_text and secret_part(value) not in failed.exc_text
    assert "Traceback" in failed.exc_text  # the traceback itself survives


@pytest.mark.parametrize(("name", "value"), CASES, ids=[n for n, _ in CASES])
def test_each_format_is_refused_in_a_run_spec(name: str, value: str) -> None:
    with pytest.raises(InvalidArgument, match="looks like a secret"):
        validation.command_spec({"command": f"deploy --with '{value}'"})


def test_a_configured_token_of_any_shape_is_redacted_by_value() -> None:
    register_secret("plain-words-but-a-token")
    assert redact("hello plain-words-but-a-token bye") == f"hello {REDACTED} bye"


def test_secret_env_values_are_refused_and_references_accepted() -> None:
    with pytest.raises(InvalidArgument, match=r"spec\.env\.DB_PASSWORD looks like a secret"):
        validation.command_spec({"command": "migrate", "env": {"DB_PASSWORD": "hunter2"}})
    validation.command_spec(
        {"command": "migrate", "env": {"DB_PASSWORD": {"secret_ref": "db"}, "MODE": "fast"}}
    )
    validation.command_spec({"command": 'curl -H "Authorization: Bearer $API_TOKEN" x'})
    with pytest.raises(InvalidArgument, match="secret_ref"):
        validation.command_spec({"command": "x", "env": {"A": {"secret_ref": "../etc"}}})
