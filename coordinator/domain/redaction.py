"""Redaction of secret-looking values and the allow-list for event payloads (seed B §17)."""

from __future__ import annotations

import json
import re
from typing import Any

REDACTED = "[redacted]"
MAX_SUMMARY_CHARS = 2000
MAX_PAYLOAD_BYTES = 4096
MAX_PAYLOAD_STRING = 512

_SECRET_PATTERNS = [
    # "Bearer <token>" first: the key=value rule below would otherwise eat the word "Bearer"
    re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]{8,})"),
    # key=value, key: value, "key": "value", --key value, where the key names a secret
    re.compile(
        r"(?i)(--?[\w.-]*(?:password|passwd|secret|token|api[_-]?key|apikey)[\w.-]*)(\s+)"
        r"(?!-)(\"[^\"]*\"|'[^']*'|\S+)"
    ),
    re.compile(
        r"(?i)\b([\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
        r"private[_-]?key|credential|authorization)[\w.-]*[\"']?)(\s*[=:]\s*)"
        r"(\"[^\"]*\"|'[^']*'|\S+)"
    ),
]
_SECRET_TOKENS = [
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}\b"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
    ),
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^/\s:@]*:([^@\s]+)@"),
]


def redact(text: str) -> str:
    """Replace secret-looking values; keeps the surrounding words so a person can still read it."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    for token in _SECRET_TOKENS:
        if token.groups:
            text = token.sub(lambda m: m.group(0).replace(m.group(1), REDACTED), text)
        else:
            text = token.sub(REDACTED, text)
    return text


def summary(text: str | None) -> str | None:
    """An error summary as stored: redacted and bounded."""
    if text is None:
        return None
    cleaned = redact(text)
    if len(cleaned) > MAX_SUMMARY_CHARS:
        cleaned = cleaned[: MAX_SUMMARY_CHARS - 1] + "…"
    return cleaned


#: Keys an event payload may carry. Anything else is dropped: no prompts, logs or tool input.
PAYLOAD_KEYS = frozenset(
    {
        "reason",
        "trace_parent",
        "from_status",
        "to_status",
        "attempt_no",
        "runtime_instance_id",
        "runtime_device_id",
        "runtime_task_id",
        "seq",
        "last_event_seq",
        "reported_type",
        "outcome",
        "exit_code",
        "error_code",
        "error_summary",
        "retry_of_run_id",
        "previous_attempt_id",
        "lease_expires_at_ms",
        "ignored_because",
        "observed_state",
        "sync_state",
        "cancel_requested",
        "stream",
        "text",
        "data",
        "offset",
        "skipped_bytes",
        "grace_ms",
        "log_size",
        "log_path",
        "log_bytes",
        "log_sha256",
        "signal",
        "turn_status",
        "operator",
        "resolved_as",
        "recoveries",
        "max_recoveries",
        "explanation",
        "permanent",
        "refusals",
        "max_refusals",
        "source",
    }
)
#: Keys whose strings may be longer than MAX_PAYLOAD_STRING (a bounded output chunk).
_LONG_STRINGS = {"text": 3000, "data": 3000}


def clean_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Allow-listed keys, scalar values, redacted strings, and a hard size cap."""
    cleaned: dict[str, Any] = {}
    for key in sorted(payload):
        value = payload[key]
        if key not in PAYLOAD_KEYS or value is None:
            continue
        if isinstance(value, str):
            value = redact(value)[: _LONG_STRINGS.get(key, MAX_PAYLOAD_STRING)]
        elif not isinstance(value, bool | int | float):
            continue
        cleaned[key] = value
    while len(json.dumps(cleaned, separators=(",", ":"))) > MAX_PAYLOAD_BYTES and cleaned:
        longest = max(cleaned, key=lambda k: len(str(cleaned[k])))
        del cleaned[longest]
    return cleaned
