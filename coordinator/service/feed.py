"""Wakes watchers for commits of every process on the database, not only this one.

One tailer per process follows the whole event stream by cursor (docs/events.md) and sets the
waiters of each run and project it sees events for; commits of this process (the EventHub)
wake their waiters at once and the tailer too. Like the hub, the feed only says "look again":
watchers read their events back from the store by their own position and also look again
after a timeout, so a missed wake-up delays an event, it never loses one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator

from coordinator.domain.cursor import EventCursor
from coordinator.service.hub import EventHub
from coordinator.service.transitions import Result
from coordinator.store.base import RunReader

log = logging.getLogger(__name__)

TAIL_POLL_SECONDS = 0.2
TAIL_PAGE = 1000

Key = tuple[str, str]  # ("run", run_id) or ("project", project_id)


class EventFeed:
    def __init__(
        self, store: RunReader, hub: EventHub, poll_seconds: float = TAIL_POLL_SECONDS
    ) -> None:
        self._store = store
        self._poll_seconds = poll_seconds
        self._waiters: defaultdict[Key, set[asyncio.Event]] = defaultdict(set)
        self._kick = asyncio.Event()
        self._tailer: asyncio.Task[None] | None = None
        hub.listen(self._on_local_commit)

    @contextlib.contextmanager
    def follow(self, kind: str, key: str) -> Iterator[asyncio.Event]:
        """An event set on every later commit touching the run or project ``key``. Clear it
        before each read of the store, then wait on it: nothing committed after the clear
        can go unnoticed by the tailer."""
        waiter = asyncio.Event()
        self._waiters[(kind, key)].add(waiter)
        self._ensure_tailer()
        try:
            yield waiter
        finally:
            self._waiters[(kind, key)].discard(waiter)
            if not self._waiters[(kind, key)]:
                del self._waiters[(kind, key)]

    async def close(self) -> None:
        if self._tailer is not None:
            self._tailer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tailer
            self._tailer = None

    def _on_local_commit(self, result: Result) -> None:
        self._wake(("run", result.run.id))
        self._wake(("project", result.run.project_id))
        self._kick.set()

    def _wake(self, key: Key) -> None:
        for waiter in self._waiters.get(key, ()):
            waiter.set()

    def _ensure_tailer(self) -> None:
        if self._tailer is None or self._tailer.done():
            self._tailer = asyncio.get_running_loop().create_task(self._tail())

    async def _tail(self) -> None:
        """Runs while anyone follows; a later follower starts a new tailer."""
        cursor: EventCursor | None = None
        started = False
        while self._waiters:
            try:
                if not started:
                    cursor, started = await self._store.last_event_cursor(), True
                events = await self._store.list_project_events(None, cursor, TAIL_PAGE)
            except Exception:  # the store is down or busy: watchers still poll on their own
                log.warning("event feed: reading the event stream failed", exc_info=True)
                events = []
            for event in events:
                self._wake(("run", event.run_id))
                self._wake(("project", event.project_id))
            if events:
                cursor = events[-1].cursor
            if len(events) < TAIL_PAGE:
                self._kick.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), self._poll_seconds)
