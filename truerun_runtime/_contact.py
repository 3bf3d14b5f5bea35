"""The last moment truerun was reachable, kept in the outbox directory, so the time without
contact (what self-fencing counts) survives a restart of the runtime."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

CONTACT_FILE = "contact.json"


def record(path: Path) -> None:
    """Truerun is reachable now (written atomically; a failure is logged, never raised)."""
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps({"last_contact": time.time()}))
        os.replace(tmp, path)
    except OSError as error:
        log.warning("cannot record the last contact: %s", error)


def seconds_since(path: Path) -> float:
    """Seconds since the recorded last contact; 0 when none was recorded (a fresh install)."""
    try:
        last = float(json.loads(path.read_text())["last_contact"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0
    return max(0.0, time.time() - last)
