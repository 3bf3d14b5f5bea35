"""The truerun runtime SDK: the client side of RuntimeService for runtimes that run attempts.

``RuntimeClient`` holds the Connect stream (hello, heartbeats, events, Start/Cancel/Inspect,
acks) and reconnects with bounded, jittered backoff; ``Outbox`` keeps every event on disk
until truerun acknowledges it; a ``RuntimeHandler`` decides what Start, Cancel and Inspect
do. See docs/runtime-protocol.md.
"""

from __future__ import annotations

from ._api import Backoff, RuntimeHandler
from ._client import RuntimeClient
from ._events import TERMINAL_TYPES, make_event
from ._outbox import Outbox, OutboxCorrupt

__all__ = [
    "TERMINAL_TYPES",
    "Backoff",
    "Outbox",
    "OutboxCorrupt",
    "RuntimeClient",
    "RuntimeHandler",
    "make_event",
]
