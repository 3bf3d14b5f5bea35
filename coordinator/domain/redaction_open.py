"""Where a secret may still be being written: the part of an unfinished line that a
redaction rule could match once more text arrives (docs/runtime-protocol.md "Output and
terminal events"). Pure.

Output streams in chunks cut anywhere, so the line still being written may end inside a
secret (``Authorization: Bear``, ``"password": "w1 w2``, ``AKIAIOSF``). ``open_at`` answers
where such a possible secret begins (or None: nothing the line ends with can become one),
so the output store never writes that part of the line in clear
(coordinator/domain/output.py).

Two kinds of rule, two tests:

- key/value rules (``password=...``, ``Bearer ...``, ``"token": "..."``, a URL's
  ``user:pass@``): the line is extended with a few probe continuations (a long token, a
  space and a token, a closing quote, an ``@``); a rule whose value reaches past the end
  of the line with one of them is open there, from its value's start (or the line's end
  when the value would begin after it: the key is in the line, the value is not yet).
- token formats (``AKIA...``, ``ghp_...``, ``eyJ...``, truerun's own ``trtcb_...``): the
  line ends with a word that starts with the format's fixed prefix (or with at least 4
  characters of it), whatever its length so far.

Over-approximating is safe (the part is only kept out of clear storage); missing one is a
leak, so tests/unit/test_redaction_stream.py cuts every format of the corpus at every
position.
"""

from __future__ import annotations

import re

from coordinator.domain.redaction import _SECRET_PATTERNS, known_prefix_at

#: A value pattern's group 3 is the secret; the URL rule's group 1 is its password.
_URL_PASSWORD = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^/\s:@]*:([^@\s]*)@")
_PROBES = ("Z" * 72, " " + "Z" * 72, '"', "'", 'Z"', "Z'", "@", "Z@", ":Z@")


def _prefix_rule(prefix: str, rest: str = r"[A-Za-z0-9_\-.+/=~]*", flags: str = "") -> str:
    """A word that is this token format's start: at least 4 characters of its fixed prefix
    (all of it when shorter), or the whole prefix and then characters of its body."""
    escaped = [re.escape(prefix[:size]) for size in range(len(prefix), min(4, len(prefix)) - 1, -1)]
    return (
        f"(?{flags}:{re.escape(prefix)}{rest}|{'|'.join(escaped)})"
        if flags
        else (f"(?:{re.escape(prefix)}{rest}|{'|'.join(escaped)})")
    )


_TOKEN_STARTS = [
    _prefix_rule(prefix)
    for prefix in (
        "trtcb_",
        "trtrt_",
        "trtapi_",
        "trtls_",
        "AKIA",
        "ASIA",
        "ghp_",
        "gho_",
        "ghu_",
        "ghs_",
        "ghr_",
        "github_pat_",
        "glpat-",
        "sk-",
        "sk_live_",
        "sk_test_",
        "rk_live_",
        "rk_test_",
        "pk_live_",
        "pk_test_",
        "whsec_",
        "xoxa-",
        "xoxb-",
        "xoxp-",
        "xoxo-",
        "xoxs-",
        "xoxr-",
        "AIza",
        "ya29.",
        "eyJ",
        "SG.",
        "npm_",
        "pypi-",
        "hf_",
        "dop_v1_",
        "shpat_",
        "shpss_",
        "shpca_",
        "shppa_",
        "hvs.",
        "hvb.",
        "dckr_pat_",
        "dapi",
        "lin_api_",
        "sq0atp-",
        "sq0csp-",
        "ATATT3",
    )
]
_TOKEN_STARTS += [
    _prefix_rule("https://hooks.slack.com/services/"),
    _prefix_rule("accountkey=", flags="i"),
    r"SK[0-9a-f]+",  # Twilio
    r"\d{8,10}(?::[A-Za-z0-9_-]*)?",  # Telegram bots
]
_TOKEN_START = re.compile("|".join(f"(?:{rule})" for rule in _TOKEN_STARTS))
#: Where a token may begin inside the line's last word: its start, or after a character
#: no token holds (``key=AKIA...``, ``(ghp_...``, ``"eyJ...``).
_WORD = re.compile(r"\S*\Z")
_TOKEN_BOUNDARY = re.compile(r"[^A-Za-z0-9_]")


def open_at(line: str) -> int | None:
    """Where, in ``line`` (text after its last newline, in clear), a secret may begin that
    more text could complete or extend; None when nothing it ends with can be one."""
    candidates = [at for at in (_value_open(line), _token_open(line), known_prefix_at(line))]
    found = [at for at in candidates if at is not None]
    return min(found) if found else None


def _value_open(line: str) -> int | None:
    end, best = len(line), None
    for probe in _PROBES:
        text = line + probe
        for pattern, group in [*((p, 3) for p in _SECRET_PATTERNS), (_URL_PASSWORD, 1)]:
            for match in pattern.finditer(text):
                if match.start() < end < match.end(group) or (
                    match.start() < end <= match.start(group)
                ):
                    at = min(match.start(group), end)
                    best = at if best is None else min(best, at)
    return best


def _token_open(line: str) -> int | None:
    word = _WORD.search(line)
    assert word is not None  # \S*\Z matches every string
    start = word.start()
    starts = [start] + [start + m.end() for m in _TOKEN_BOUNDARY.finditer(line, start)]
    for at in starts:
        if at < len(line) and _TOKEN_START.fullmatch(line, at):
            return at
    return None
