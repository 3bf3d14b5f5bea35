"""A bound on failed authentications that never locks out the honest (docs/operations.md
"Authentication", "The failure bound").

A caller's credential is checked first (timing-safe); only a failure meets the bound, so a
valid credential is never refused by it, whatever its address sent before. Failures are
counted per key within a sliding window: the door keys them by (source, fingerprint), a
fingerprint being a keyed hash of the presented credential (never the credential, never
stored in clear), and by source alone with a larger limit, so that one address spraying
distinct guesses is slowed too. Past a key's limit its failures are refused with the seconds
until the oldest counted failure leaves the window (Retry-After, RetryInfo). Pure over its
clock: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections import deque
from collections.abc import Callable, Hashable

#: Per-process key of the fingerprints: a fingerprint kept in memory says nothing a guesser
#: could check offline, and means nothing to another process.
_FINGERPRINT_KEY = secrets.token_bytes(32)
#: How many keys one bound tracks at most (memory under a spray of sources or guesses).
MAX_KEYS = 10_000


def fingerprint(credential: str) -> str:
    """A short keyed hash of ``credential`` ("" for none): what a failure is counted under."""
    if not credential:
        return ""
    return hmac.new(_FINGERPRINT_KEY, credential.encode(), hashlib.sha256).hexdigest()[:32]


class SlidingBound:
    """At most ``limit`` failures per key within ``window_s``. ``refusal(key)`` is None
    while the key may fail again, else the seconds until it may; ``failed(key)`` counts
    one failure (a refused attempt is not counted: a key's window never grows past the
    limit, and a caller who stops is free after ``window_s``)."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._max_keys = max_keys
        self._failures: dict[Hashable, deque[float]] = {}

    def _current(self, key: Hashable) -> deque[float] | None:
        failures = self._failures.get(key)
        if failures is None:
            return None
        horizon = self._clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[key]
            return None
        return failures

    def refusal(self, key: Hashable) -> float | None:
        failures = self._current(key)
        if failures is None or len(failures) < self.limit:
            return None
        return max(failures[0] + self.window_s - self._clock(), 0.0)

    def failed(self, key: Hashable) -> None:
        failures = self._current(key)
        if failures is None:
            if len(self._failures) >= self._max_keys:  # the oldest key goes first
                self._failures.pop(next(iter(self._failures)))
            failures = self._failures[key] = deque(maxlen=max(self.limit, 1))
        failures.append(self._clock())

    def __len__(self) -> int:
        return len(self._failures)


def retry_after_seconds(wait_s: float) -> int:
    """Whole seconds for a Retry-After header: at least 1 (0 would invite a busy retry)."""
    return max(1, math.ceil(wait_s))
