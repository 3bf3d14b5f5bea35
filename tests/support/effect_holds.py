"""The effect fixture's withhold switch (tests/support/effect_fixture.py): which answers are
held back, for how long, and how each hold ended."""

from __future__ import annotations

import select
import socket
import threading
import time
from typing import Any

_POLL_S = 0.1  # how often a held request looks for a release or a hung-up caller


class Holds:
    """The withhold switch and the answers held back under it."""

    def __init__(self, hold_s: float, withhold: bool) -> None:
        self.hold_s = hold_s
        self.withhold = withhold
        self.keys: frozenset[str] = frozenset()  # held whatever ``withhold`` says
        self._cond = threading.Condition()
        self._releases = 0  # a release frees every hold open at that moment
        self.open: dict[int, str] = {}  # request number -> key
        self.ended = {"released": 0, "hung_up": 0, "timed_out": 0}
        self._next = 0

    def release(self) -> None:
        with self._cond:
            self._releases += 1
            self._cond.notify_all()

    def hold(self, key: str, conn: socket.socket) -> str:
        """Hold until released, the caller hangs up, or hold_s; says which."""
        deadline = time.monotonic() + self.hold_s
        with self._cond:
            self._next += 1
            number = self._next
            self.open[number] = key
            releases = self._releases
        outcome = "timed_out"
        try:
            while time.monotonic() < deadline:
                with self._cond:
                    if self._cond.wait_for(lambda: self._releases != releases, _POLL_S):
                        outcome = "released"
                        break
                if _hung_up(conn):
                    outcome = "hung_up"
                    break
        finally:
            with self._cond:
                del self.open[number]
                self.ended[outcome] += 1
        return outcome

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {
                "withhold": self.withhold,
                "withhold_keys": sorted(self.keys),
                "open": len(self.open),
                "open_keys": sorted(self.open.values()),
                **self.ended,
            }


def _hung_up(conn: socket.socket) -> bool:
    """The caller closed its end (a killed process's sockets are closed by the kernel)."""
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
