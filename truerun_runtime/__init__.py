"""truerun's runtime package: the SDK (the client side of RuntimeService) and, in
``truerun_runtime.agent``, the reference agent built on it (``truerun agent``, or
``truerun-agent`` from the truerun-runtime distribution a device installs).

``RuntimeClient`` holds the Connect stream (hello, heartbeats, events, Start/Cancel/Inspect,
acks) and reconnects with bounded, jittered backoff; ``Outbox`` keeps every event on disk
until truerun acknowledges it; ``StartJournal`` keeps every Start received (so Inspect may
answer "never received"); a ``RuntimeHandler`` decides what Start, Cancel and Inspect
do. ``channel_target`` turns a target and ``TlsFiles`` into the address and the TLS
credentials ``RuntimeClient`` takes (see docs/operations.md, "TLS"). ``LongTaskAttempt`` is
a long task's attempt talking to LongTaskAttemptService (``truerun_runtime.longtask``: its
step context, the runtime's read-only checkers, the step driver). See
docs/runtime-protocol.md.

The names are imported on first use: the agent's per-task supervisor imports
``truerun_runtime.agent.supervisor`` (so this package) with ``python -I -S`` and must start
fast, without grpc or protobuf.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._api import Backoff, RuntimeHandler
    from ._client import RuntimeClient
    from ._events import TERMINAL_TYPES, make_event
    from ._outbox import Outbox, OutboxCorrupt
    from ._starts import StartJournal
    from ._tls import TlsFileError, TlsFiles, channel_target
    from .longtask import LongTaskAttempt, LongTaskError

_HOME = {
    "Backoff": "._api",
    "RuntimeHandler": "._api",
    "RuntimeClient": "._client",
    "TERMINAL_TYPES": "._events",
    "make_event": "._events",
    "Outbox": "._outbox",
    "OutboxCorrupt": "._outbox",
    "StartJournal": "._starts",
    "TlsFileError": "._tls",
    "TlsFiles": "._tls",
    "channel_target": "._tls",
    "LongTaskAttempt": ".longtask",
    "LongTaskError": ".longtask",
}

__all__ = [
    "TERMINAL_TYPES",
    "Backoff",
    "LongTaskAttempt",
    "LongTaskError",
    "Outbox",
    "OutboxCorrupt",
    "RuntimeClient",
    "RuntimeHandler",
    "StartJournal",
    "TlsFileError",
    "TlsFiles",
    "channel_target",
    "make_event",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
