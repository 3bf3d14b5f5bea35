"""Webhook signatures (pure), shared by the schedules' inbound webhooks
(automations/domain/webhooks.py) and the long tasks' outbound notices: HMAC-SHA256 over
``"<t>.<delivery_id>.<body>"``, sent as ``t=<ms>,v1=<hex>``; a receiver accepts it only within
REPLAY_WINDOW_MS of its clock. Secrets are derived from the server's key (TRUERUN_WEBHOOK_KEY)
and the names of what they sign for, so truerun stores none."""

from __future__ import annotations

import base64
import hashlib
import hmac

REPLAY_WINDOW_MS = 5 * 60_000


def derive_secret(key: bytes, purpose: str, *names: str) -> str:
    """A signing secret derivable only with ``key``: ``purpose`` and ``names`` separated by
    NUL (no name may hold one), so two subscriptions never share a secret."""
    message = "\0".join((purpose, *names)).encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return "whsec_" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def sign(secret: str, timestamp_ms: int, delivery_id: str, body: bytes) -> str:
    """The signature header value a sender computes. A delivery id may not contain ".":
    "<t>.a.b.<c>" would verify as delivery "a" with body "b.<c>" too."""
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
