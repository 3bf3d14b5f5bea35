"""Identifiers: UUIDv7 strings (time-ordered, opaque to every API) and unguessable tokens."""

from __future__ import annotations

import base64
import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_counter = 0
# Random bits for ids, drawn from the OS 4 KiB at a time rather than 8 bytes a syscall (a
# run makes about a dozen ids). A forked child must never reuse its parent's unread bytes
# (both would make the same ids), so it starts with none.
_RANDOM_CHUNK = 4096
_random = b""
_random_at = 0


def _forget_random() -> None:
    global _random, _random_at
    _random, _random_at = b"", 0


os.register_at_fork(after_in_child=_forget_random)


def _random_bytes(n: int) -> bytes:
    """``n`` unread bytes of the OS's randomness (call with ``_lock`` held)."""
    global _random, _random_at
    if _random_at + n > len(_random):
        _random, _random_at = os.urandom(_RANDOM_CHUNK), 0
    _random_at += n
    return _random[_random_at - n : _random_at]


# The variant nibble of a UUIDv7 ("10" then two random bits), from a random hex digit.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
_prefix_ms = -1
_prefix = ""  # the text of the id's first 13 digits (48-bit milliseconds, version 7)


def uuid7() -> str:
    """A UUIDv7 (RFC 9562); ids made in one process in the same millisecond stay ordered."""
    global _last_ms, _counter, _prefix_ms, _prefix
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms, _counter = now_ms, int.from_bytes(_random_bytes(2), "big") & 0x7FF
        else:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms, _counter = _last_ms + 1, 0
        if _last_ms != _prefix_ms:
            h = f"{_last_ms & ((1 << 48) - 1):012x}"
            _prefix, _prefix_ms = f"{h[:8]}-{h[8:]}-7", _last_ms
        prefix, counter = _prefix, _counter
        tail = _random_bytes(8).hex()
    # The canonical text spelled out from pieces (the millisecond's text made once): a run
    # makes about a dozen ids, and a UUID object costs about twice this (issue #16).
    return f"{prefix}{counter:03x}-{_VARIANT[tail[0]]}{tail[1:4]}-{tail[4:]}"


_TOKEN_BYTES = 24  # as secrets.token_urlsafe(24): 32 URL-safe characters, no padding


def new_token(kind: str = "cb") -> str:
    """An unpredictable token: ``cb`` callback, ``rt`` runtime, ``api`` API, ``ls`` lease.
    Its prefix (``trtcb_...``) makes every token truerun issued recognisable, so the
    redactor removes it from anything stored or logged (coordinator/domain/redaction.py)."""
    return new_tokens(1, kind)[0]


def new_tokens(count: int, kind: str = "cb") -> list[str]:
    """``count`` tokens as ``new_token`` makes them, from one read of the OS's randomness (a
    claim round makes one per attempt it may claim, most of them never used)."""
    raw = os.urandom(_TOKEN_BYTES * count)
    return [
        f"trt{kind}_{base64.urlsafe_b64encode(raw[i : i + _TOKEN_BYTES]).decode()}"
        for i in range(0, len(raw), _TOKEN_BYTES)
    ]


def now_ms() -> int:
    return time.time_ns() // 1_000_000
