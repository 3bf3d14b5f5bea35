"""The held line of an attempt's output, sealed for the attempt row: readable again only by
the process that wrote it (docs/runtime-protocol.md "Output and terminal events"). Pure.

The line still being written may hold the start of a secret, and must be joined in clear
with the next chunk to be redacted right. It is kept on the attempt row (a crash must not
lose output), so it is written there sealed: encrypted under a key that exists only in this
process's memory (``PROCESS_KEY``, random at start, never stored or logged). The same process
opens it again for the next chunk; after a restart, or on another coordinator, it cannot, and
the row's redacted fallback is used instead. So nothing un-redacted is ever written (not in the
row, not in SQLite's freed pages or WAL), and a crash costs at most the rest of one line.

The cipher is a deterministic authenticated one built from HMAC-SHA256 only (SIV: the
synthetic IV is a MAC of the plaintext, the keystream HMAC in counter mode): a sealed text
that fails its check (another key, a change) opens to None.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

#: The key held lines are sealed with: this process's, in memory only.
PROCESS_KEY = secrets.token_bytes(32)
#: Starts the sealed part of a stored held line (a private-use character: clear output
#: that holds one has it replaced, so it cannot forge a seal's start).
MARK = "\ue000"
_VERSION = "s1."


def seal(key: bytes, plaintext: str) -> str:
    """``plaintext`` sealed: ``s1.`` + base64 of IV and ciphertext, ASCII."""
    data = plaintext.encode()
    iv = hmac.new(_subkey(key, b"iv"), data, hashlib.sha256).digest()[:16]
    body = bytes(a ^ b for a, b in zip(data, _stream(key, iv, len(data)), strict=True))
    return _VERSION + base64.urlsafe_b64encode(iv + body).decode("ascii")


def unseal(key: bytes, sealed: str) -> str | None:
    """The plaintext, or None when ``sealed`` was not sealed with ``key`` (or was changed)."""
    if not sealed.startswith(_VERSION):
        return None
    try:
        raw = base64.urlsafe_b64decode(sealed[len(_VERSION) :].encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        return None
    if len(raw) < 16:
        return None
    iv, body = raw[:16], raw[16:]
    data = bytes(a ^ b for a, b in zip(body, _stream(key, iv, len(body)), strict=True))
    expected = hmac.new(_subkey(key, b"iv"), data, hashlib.sha256).digest()[:16]
    if not hmac.compare_digest(iv, expected):
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _subkey(key: bytes, label: bytes) -> bytes:
    return hmac.new(key, b"truerun held line " + label, hashlib.sha256).digest()


def _stream(key: bytes, iv: bytes, size: int) -> bytes:
    stream_key = _subkey(key, b"stream")
    blocks = [
        hmac.new(stream_key, iv + counter.to_bytes(8, "big"), hashlib.sha256).digest()
        for counter in range((size + 31) // 32)
    ]
    return b"".join(blocks)[:size]
