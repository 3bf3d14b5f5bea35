"""Wakes watchers after a commit. Only committed events ever reach a watcher: the hub only
says "look again"; watchers read the events back from the store."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

from coordinator.service.transitions import Result


class EventHub:
    def __init__(self) -> None:
        self._runs: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._listeners: list[Callable[[Result], None]] = []

    def listen(self, listener: Callable[[Result], None]) -> None:
        """Call ``listener`` with every committed result (after the commit, in this process)."""
        self._listeners.append(listener)

    def publish(self, result: Result) -> None:
        for listener in self._listeners:
            listener(result)
        for waiter in self._runs.get(result.run.id, ()):
            waiter.set()

    async def wait_run(self, run_id: str, timeout: float) -> None:
        await self._wait(self._runs, run_id, timeout)

    @staticmethod
    async def _wait(
        registry: defaultdict[str, set[asyncio.Event]], key: str, timeout: float
    ) -> None:
        """Return on the next commit for ``key`` or after ``timeout`` (another process may
        have committed: callers re-read either way)."""
        waiter = asyncio.Event()
        registry[key].add(waiter)
        try:
            await asyncio.wait_for(waiter.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            registry[key].discard(waiter)
            if not registry[key]:
                del registry[key]
