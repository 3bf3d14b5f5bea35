"""Webhook signatures (pure). A schedule's signing secret is derived from the server's key
and the schedule's name and generation, so truerun stores no secret at all: rotating bumps
the generation. A delivery signs ``"<t>.<delivery_id>.<body>"`` with HMAC-SHA256 and is
accepted only within REPLAY_WINDOW_MS of the server's clock; its delivery id is the run's
idempotency key, so a replay inside the window returns the run it already created. A delivery
id may not contain ".": "<t>.a.b.<c>" would verify as delivery "a" with body "b.<c>" too, a
replay under a new id."""

from __future__ import annotations

import base64
import hashlib
import hmac

REPLAY_WINDOW_MS = 5 * 60_000


def secret_for(key: bytes, project_id: str, schedule_id: str, generation: int) -> str:
    """The schedule's signing secret: shown once at creation, derivable only with the key."""
    message = f"truerun-webhook\0{project_id}\0{schedule_id}\0{generation}".encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return "whsec_" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def sign(secret: str, timestamp_ms: int, delivery_id: str, body: bytes) -> str:
    """The signature header value a sender computes (and the tests and CLI use)."""
    if "." in delivery_id:
        raise ValueError(f"delivery id {delivery_id!r}: a '.' would make the signature ambiguous")
    signed = f"{timestamp_ms}.{delivery_id}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp_ms},v1={digest}"


def verify(secret: str, signature: str, delivery_id: str, body: bytes, now_ms: int) -> bool:
    """True only for a well-formed signature by ``secret`` inside the replay window."""
    fields = dict(part.split("=", 1) for part in signature.split(",") if "=" in part)
    stamp, given = fields.get("t", ""), fields.get("v1", "")
    if "." in delivery_id:
        return False
    # ASCII digits, 15 at most: int() refuses "²" and 5000-digit strings with a ValueError.
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 15):
        return False
    if abs(now_ms - int(stamp)) > REPLAY_WINDOW_MS:
        return False
    expected = sign(secret, int(stamp), delivery_id, body).split("v1=", 1)[1]
    # As bytes: compare_digest raises TypeError on a str with non-ASCII characters.
    return hmac.compare_digest(expected.encode(), given.encode())
