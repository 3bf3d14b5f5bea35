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

from kernel import webhook_signing

REPLAY_WINDOW_MS = webhook_signing.REPLAY_WINDOW_MS


def secret_for(key: bytes, project_id: str, schedule_id: str, generation: int) -> str:
    """The schedule's signing secret: shown once at creation, derivable only with the key."""
    message = f"truerun-webhook\0{project_id}\0{schedule_id}\0{generation}".encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return "whsec_" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


# The signing itself is the kernel's, shared with the long tasks' notices.
sign = webhook_signing.sign
verify = webhook_signing.verify
