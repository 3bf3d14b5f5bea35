"""The truerun runtime SDK: the client side of RuntimeService for runtimes that run attempts.

``RuntimeClient`` holds the Connect stream (hello, heartbeats, events, Start/Cancel/Inspect,
acks) and reconnects with bounded, jittered backoff; ``Outbox`` keeps every event on disk
until truerun acknowledges it; a ``RuntimeHandler`` decides what Start, Cancel and Inspect
do. ``channel_target`` turns a target and ``TlsFiles`` into the address and the TLS
credentials ``RuntimeClient`` takes (see docs/operations.md, "TLS"). See
docs/runtime-protocol.md.
"""

from __future__ import annotations

from ._api import Backoff, RuntimeHandler
from ._client import RuntimeClient
from ._events import TERMINAL_TYPES, make_event
from ._outbox import Outbox, OutboxCorrupt
from ._tls import TlsFileError, TlsFiles, channel_target

__all__ = [
    "TERMINAL_TYPES",
    "Backoff",
    "Outbox",
    "OutboxCorrupt",
    "RuntimeClient",
    "RuntimeHandler",
    "TlsFileError",
    "TlsFiles",
    "channel_target",
    "make_event",
]
