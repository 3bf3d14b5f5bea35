"""How a process writes its logs (TRUERUN_LOG_FORMAT): one stderr handler on the root logger,
its formatter JSON or text (kernel/logs.py), the redaction filter on it either way, so a
secret is cleaned out of the message and the traceback before any format writes it."""

from __future__ import annotations

import logging

from coordinator.domain.redaction import RedactingFilter
from kernel.config import ConfigError, Settings
from kernel.logs import FORMATS, formatter

#: The separate services' default: a log collector reads their stderr line by line.
SERVICE_DEFAULT = "json"
#: `truerun dev` and the client commands: a person reads the terminal.
TERMINAL_DEFAULT = "text"
#: The gateway's access lines (gateway/access_log.py): per request, so on a terminal (text)
#: only the failures (5xx, logged as warnings) show; a collector (json) gets every one.
ACCESS_LOGGER = "truerun.access"


def log_format(settings: Settings, default: str) -> str:
    chosen = settings.log_format or default
    if chosen not in FORMATS:
        raise ConfigError(
            f"TRUERUN_LOG_FORMAT={settings.log_format!r} is not one of {', '.join(FORMATS)}"
        )
    return chosen


def configure_logging(kind: str, level: int = logging.INFO) -> None:
    """One handler on stderr writing ``kind`` (replacing the one an earlier call installed).
    When someone else already handles the root logger (a test harness calling ``main``, a
    program embedding truerun) it is left alone, as ``logging.basicConfig`` would, but for
    the redaction filter, which every handler gets."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h, _Handler)]
    if root.handlers and not ours:
        for foreign in root.handlers:
            if not any(isinstance(f, RedactingFilter) for f in foreign.filters):
                foreign.addFilter(RedactingFilter())
        return
    for handler in ours:
        root.removeHandler(handler)
    handler = _Handler()
    handler.setFormatter(formatter(kind))
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # a Python warning is a record too, not raw stderr lines
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO if kind == "json" else logging.WARNING)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler configure_logging installs (so a second call knows its own)."""


def configure_for(settings: Settings, default: str) -> None:
    configure_logging(log_format(settings, default))
