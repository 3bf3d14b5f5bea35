"""Redaction of secret-looking values and the allow-list for event payloads (seed B §17)."""

from __future__ import annotations

import functools
import json
import re
import traceback
from typing import Any

REDACTED = "[redacted]"
MAX_SUMMARY_CHARS = 2000
MAX_PAYLOAD_BYTES = 4096
MAX_PAYLOAD_STRING = 512

#: Key/value rules are line-local (``[ \t]``, never ``\s``, between a key and its value): output
#: is redacted a line at a time as it streams (coordinator/domain/output.py), and a rule that
#: could reach over a newline would redact a text differently depending on where it was cut.
_SECRET_PATTERNS = [
    # "Bearer <token>" first: the key=value rule below would otherwise eat the word "Bearer"
    re.compile(r"(?i)\b(bearer|basic)([ \t]+)([A-Za-z0-9._~+/=-]{8,})"),
    # key=value, key: value, "key": "value", --key value, where the key names a secret
    re.compile(
        r"(?i)(--?[\w.-]*(?:password|passwd|secret|token|api[_-]?key|apikey)[\w.-]*)([ \t]+)"
        r"(?!-)(\"[^\"\n]*\"|'[^'\n]*'|(?:\$\{[^}\n]{0,256}\}|\S)+)"
    ),
    re.compile(
        r"(?i)\b([\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
        r"private[_-]?key|credential|authorization)[\w.-]*[\"']?)([ \t]*[=:][ \t]*)"
        r"(\"[^\"\n]*\"|'[^'\n]*'|(?:\$\{[^}\n]{0,256}\}|\S)+)"
    ),
]
#: Every token truerun issues starts with this (kernel/ids.new_token), so any of them is
#: recognised wherever it turns up, in clear or not, without truerun keeping its value.
ISSUED_PREFIX = "trt"
_SECRET_TOKENS = [
    re.compile(rf"\b{ISSUED_PREFIX}(?:cb|rt|api|ls)_[A-Za-z0-9_-]{{20,}}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}\b"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}\b"),  # OpenAI, Anthropic (sk-ant-...), DeepSeek
    re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b"),  # Stripe
    re.compile(r"\bwhsec_[A-Za-z0-9]{16,}\b"),  # Stripe webhook secrets
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/]{20,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),  # Google API keys
    re.compile(r"\bya29\.[0-9A-Za-z_-]{20,}"),  # Google OAuth access tokens
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),  # SendGrid
    re.compile(r"\bSK[0-9a-f]{32}\b"),  # Twilio API keys
    re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),
    re.compile(r"\bpypi-[A-Za-z0-9_-]{50,}"),
    re.compile(r"\bhf_[A-Za-z]{30,}\b"),  # Hugging Face
    re.compile(r"\bdop_v1_[a-f0-9]{64}\b"),  # DigitalOcean
    re.compile(r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b"),  # Shopify
    re.compile(r"\bhv[sb]\.[A-Za-z0-9_-]{24,}"),  # HashiCorp Vault
    re.compile(r"\bdckr_pat_[A-Za-z0-9_-]{20,}"),  # Docker Hub
    re.compile(r"\bdapi[0-9a-f]{32}\b"),  # Databricks
    re.compile(r"\blin_api_[A-Za-z0-9]{32,}\b"),  # Linear
    re.compile(r"\bsq0(?:atp|csp)-[A-Za-z0-9_-]{22,}"),  # Square
    re.compile(r"\bATATT3[A-Za-z0-9_=-]{20,}"),  # Atlassian
    re.compile(r"\b\d{8,10}:AA[A-Za-z0-9_-]{33}\b"),  # Telegram bots
    re.compile(r"(?i)\bAccountKey=[A-Za-z0-9+/=]{40,}"),  # Azure storage
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
    ),
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^/\s:@]*:([^@\s]+)@"),
]


_known: set[str] = set()

#: An id of the shape truerun makes (a uuid, or a runtime task id ``truerun-<uuid>``): lowercase
#: hex and dashes, which no secret pattern above can match (each needs a prefix, a word or a
#: ``=``/``:`` such an id cannot hold), so it skips the patterns: several are in every event.
_ID_SHAPE = re.compile(r"(?:truerun-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: Short texts repeat (an instance id, a device, a reason): their pattern pass is remembered.
_MEMO_MAX_CHARS = 256


def register_secret(value: str) -> None:
    """A secret this process holds in clear (a configured runtime or API token): redacted by
    value wherever text is stored or logged, whatever its shape."""
    if len(value) >= 8:
        _known.add(value)


def known_prefix_at(line: str) -> int | None:
    """Where ``line`` ends with the start (4 characters or more) of a secret held by value,
    or None: the rest may come in the next chunk of output."""
    best: int | None = None
    for value in _known:
        for size in range(min(len(value) - 1, len(line)), 3, -1):
            if line.endswith(value[:size]):
                at = len(line) - size
                best = at if best is None else min(best, at)
                break
    return best


def secret_values(text: str) -> list[str]:
    """The values in ``text`` that ``redact`` would remove, as found (quotes kept)."""
    found = [value for value in _known if value in text]
    if len(text) <= _MEMO_MAX_CHARS:
        return found + list(_pattern_values_memo(text))
    return found + _pattern_values(text)


@functools.lru_cache(maxsize=4096)
def _pattern_values_memo(text: str) -> tuple[str, ...]:
    return tuple(_pattern_values(text))


def _pattern_values(text: str) -> list[str]:
    found: list[str] = []
    for pattern in _SECRET_PATTERNS:
        found += [m.group(3) for m in pattern.finditer(text)]
    for token in _SECRET_TOKENS:
        found += [m.group(1) if token.groups else m.group(0) for m in token.finditer(text)]
    return [value for value in found if not not_a_secret(value)]


def redact(text: str) -> str:
    """Replace secret-looking values; keeps the surrounding words so a person can still read it."""
    for value in _known:
        if value in text:
            text = text.replace(value, REDACTED)
    if _ID_SHAPE.fullmatch(text):
        return text
    if len(text) <= _MEMO_MAX_CHARS:
        return _patterns_memo(text)
    return _patterns(text)


@functools.lru_cache(maxsize=4096)
def _patterns_memo(text: str) -> str:
    return _patterns(text)


def _patterns(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(_value_redacted, text)
    for token in _SECRET_TOKENS:
        if token.groups:
            text = token.sub(_group_redacted, text)
        else:
            text = token.sub(REDACTED, text)
    return text


def _value_redacted(match: re.Match[str]) -> str:
    if not_a_secret(match.group(3)):
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}{REDACTED}"


def _group_redacted(match: re.Match[str]) -> str:
    if not_a_secret(match.group(1)):
        return match.group(0)
    return match.group(0).replace(match.group(1), REDACTED)


#: A reference to the command's environment: ``$X``, ``${X}``, ``${X:-default}`` (and the
#: other ``${X<op>word}`` expansions), never a secret's value (docs/runtime-protocol.md
#: "Secrets"), in any position of a value.
_ENV_REFERENCE = re.compile(
    r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*(?::?[-=?+][^}]*)?\})"
)
#: What may sit around references in one shell word: quotes, separators and operators.
_SHELL_PUNCTUATION = re.compile(r"[\"'`;,&|()<>{}\[\]\s]*")
_SHELL_OPERATOR = re.compile(r"[;|&]")


def not_a_secret(value: str) -> bool:
    """A value a rule found that is no secret: a bare auth scheme word (``Authorization:
    Bearer $T``), the redaction mark, or environment references and the punctuation
    between them only (``$A,$B``, ``${PW}&&``, ``$T;``, ``"${KEY:-none}"``)."""
    bare = value.strip("\"'")
    if bare.lower() in ("bearer", "basic", "") or bare == REDACTED:
        return True
    if not _ENV_REFERENCE.search(bare):
        return False
    # what follows a shell operator is the next command (``$T|tee log``, ``$A;echo``)
    rest = _SHELL_OPERATOR.split(_ENV_REFERENCE.sub("", bare), maxsplit=1)[0]
    return bool(_SHELL_PUNCTUATION.fullmatch(rest))


class RedactingFilter:
    """A logging filter: every record's message is redacted before any handler writes it
    (a secret in an exception text, a token in a URL, a protobuf dump)."""

    def filter(self, record: Any) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            # the traceback as a formatter would write it, redacted (a formatter uses
            # exc_text when it is set); redacted again when another handler's formatter
            # cached it first
            record.exc_text = redact(record.exc_text or _traceback(record.exc_info))
        return True


def _traceback(exc_info: Any) -> str:
    return "".join(traceback.format_exception(*exc_info)).rstrip("\n")


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
        "source",
        # activation notes (NoteRun, docs/long-tasks.md "Activation and promotion")
        "tier",
        "verdict",
        "path",
        "confidence",
        "long_task_id",
        "absorbed",
        # a long task's notice shown on its source runs (docs/long-tasks.md "Notices")
        "kind",
        "title",
        "handle",
        "command",
        # an approver's grant (docs/state-model.md "Approvals")
        "approvals",
        "required_approvals",
        "approver_groups",
    }
)
#: Keys whose strings may be longer than MAX_PAYLOAD_STRING (a bounded output chunk).
_LONG_STRINGS = {"text": 3000, "data": 3000}


def _encoded_at_most(cleaned: dict[str, Any]) -> int:
    """An upper bound of ``json.dumps(cleaned, separators=(",", ":"))``'s length: a string
    encodes to at most 12 characters each (a surrogate pair of ``\\uXXXX``) plus its quotes,
    and never to more UTF-8 bytes than that without ensure_ascii; a number to its repr
    or at most 6 more (json writes ``-Infinity`` for ``-inf``), a key as a string plus a
    colon and a comma."""
    total = 2
    for key, value in cleaned.items():
        total += 12 * len(key) + 4
        total += 12 * len(value) + 2 if isinstance(value, str) else len(repr(value)) + 6
    return total


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
    if _encoded_at_most(cleaned) <= MAX_PAYLOAD_BYTES:
        return cleaned  # the common case: provably under the cap without encoding it
    while len(json.dumps(cleaned, separators=(",", ":"))) > MAX_PAYLOAD_BYTES and cleaned:
        longest = max(cleaned, key=lambda k: len(str(cleaned[k])))
        del cleaned[longest]
    return cleaned


#: JSON keys whose value is a secret whatever it looks like, compared with case and the
#: separators ``-_. `` ignored: a key containing one of these, or one of
#: ``_SECRET_KEYS_EXACT``.
_SECRET_KEY_PARTS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "privatekey",
    "accesskey",
    "credential",
)
_SECRET_KEYS_EXACT = frozenset({"pwd", "auth", "authorization", "cookie", "setcookie"})
#: A value truerun resolves elsewhere, never a secret: ``{"secret_ref": NAME}`` (kept as
#: it is, under a secret-named key too: ``env.DB_PASSWORD = {"secret_ref": "db"}``).
_NOT_SECRET_KEYS = frozenset({"secretref"})


def secret_key(key: str) -> bool:
    """Whether a JSON object's ``key`` names a secret (``password``, ``DB-Password``,
    ``client_secret``, ``apiKey``, ``auth``, ...)."""
    folded = _folded(key)
    if folded in _NOT_SECRET_KEYS:
        return False
    return folded in _SECRET_KEYS_EXACT or any(part in folded for part in _SECRET_KEY_PARTS)


def _folded(key: str) -> str:
    return re.sub(r"[-_. ]", "", key.lower())


def redact_keys(value: Any) -> Any:
    """``value`` (JSON-like) with every string under a secret-named key replaced by
    REDACTED, at any depth (numbers, booleans and nulls are kept: ``max_tokens: 100`` stays
    readable), and every other string redacted by its shape (``redact``)."""
    if isinstance(value, dict):
        return {
            key: _all_strings_redacted(item) if secret_key(str(key)) else redact_keys(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_keys(item) for item in value]
    if isinstance(value, str):
        return redact(value)
    return value


def _all_strings_redacted(value: Any) -> Any:
    if isinstance(value, str):
        return REDACTED if value else value
    if isinstance(value, dict):
        return {
            key: item if _folded(str(key)) in _NOT_SECRET_KEYS else _all_strings_redacted(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_all_strings_redacted(item) for item in value]
    return value
