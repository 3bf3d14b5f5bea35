"""Stopping a command, and saying how it ended.

A stop (Cancel, a spec timeout, self-fencing) is persisted in ``stop.json`` before any signal
and survives a restart: SIGTERM first, SIGKILL once ``grace_ms`` passed since the SIGTERM.
The terminal event follows the evidence: the stop's type only if a signal was really sent,
otherwise what the exit status says.
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from truerun.v1 import runtime_service_pb2 as pb

from .procfs import read_json, write_json_atomic

T = pb.RuntimeEventType
STOP_TYPES: dict[str, T.ValueType] = {
    "cancel": pb.RUNTIME_EVENT_TYPE_CANCELLED,
    "timeout": pb.RUNTIME_EVENT_TYPE_TIMED_OUT,
    "self_fence": pb.RUNTIME_EVENT_TYPE_FAILED,
}
SELF_FENCED = "SELF_FENCED"


@dataclass
class StopIntent:
    reason: str  # "cancel", "timeout" or "self_fence"
    grace_ms: int
    requested_at: float
    term_sent_at: float | None = None
    kill_sent_at: float | None = None

    @classmethod
    def load(cls, path: Path) -> StopIntent | None:
        data = read_json(path)
        return cls(**data) if data else None

    def save(self, path: Path) -> None:
        write_json_atomic(path, asdict(self))

    def next_signal(self, now: float) -> signal.Signals | None:
        """The signal due now: SIGTERM first, SIGKILL after the grace, then none."""
        if self.term_sent_at is None:
            return signal.SIGTERM
        if self.kill_sent_at is None and now - self.term_sent_at >= self.grace_ms / 1000:
            return signal.SIGKILL
        return None

    def sent(self, signum: signal.Signals, now: float) -> None:
        if signum == signal.SIGTERM:
            self.term_sent_at = now
        else:
            self.kill_sent_at = now


def classify(
    status: dict[str, Any], stop: StopIntent | None
) -> tuple[T.ValueType, int | None, str, str]:
    """(terminal type, exit code, error code, summary) for a supervisor's status."""
    raw = status.get("exit_code")
    code = int(raw) if raw is not None else None
    if status.get("spawn_error"):
        return pb.RUNTIME_EVENT_TYPE_FAILED, code, "SPAWN_FAILED", str(status["spawn_error"])[:500]
    if stop is not None and stop.term_sent_at is not None:
        if stop.reason == "self_fence":
            summary = "stopped by the runtime: truerun was unreachable"
            return STOP_TYPES[stop.reason], code, SELF_FENCED, summary
        return STOP_TYPES[stop.reason], code, "", ""
    if code == 0:
        return pb.RUNTIME_EVENT_TYPE_SUCCEEDED, code, "", ""
    return pb.RUNTIME_EVENT_TYPE_FAILED, code, "EXIT_NONZERO", f"exit code {code}"
