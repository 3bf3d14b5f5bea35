"""The read side: runs with their display state and queue position, events, pages.

Reads never write. Page tokens are opaque to callers and bound to the filter they came from.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from coordinator.domain.cursor import EventCursor
from coordinator.domain.display import Display, explain
from coordinator.domain.model import Attempt, Run, RunEvent
from coordinator.domain.states import DisplayState
from coordinator.store.base import Loaded, RunCursor, RunFilter, RunReader
from kernel.errors import InvalidArgument, RunNotFound

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 50
PROJECT_EVENTS_PAGE_SIZE = 100
PROJECT_EVENTS_MAX_PAGE_SIZE = 1000
MAX_PAGE_SIZE = 500
_SCAN_BATCHES = 8  # a display-state filter scans at most this many batches per page
COUNT_BATCH = 500
COUNT_SCAN_CAP = 20_000  # CountRuns reads at most this many runs (then: complete = false)


@dataclass(frozen=True, slots=True)
class RunView:
    run: Run
    attempt: Attempt | None
    display: Display
    queue_position: int = 0


def view(loaded: Loaded, queue_position: int = 0) -> RunView:
    return RunView(loaded.run, loaded.attempt, explain(loaded.run, loaded.attempt), queue_position)


def page_size_of(requested: int) -> int:
    if requested < 0:
        raise InvalidArgument("page_size must not be negative")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def encode_token(payload: dict[str, Any]) -> str:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, binding: str) -> dict[str, Any]:
    try:
        padded = token + "=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument("page_token is not a token this server issued") from exc
    if not isinstance(payload, dict) or payload.get("b") != binding:
        raise InvalidArgument("page_token belongs to a different request")
    return payload


def _field(token: dict[str, Any], key: str, kind: type[T]) -> T:
    value = token.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidArgument("page_token is not a token this server issued")
    return value


def _binding(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


class RunQueries:
    def __init__(self, store: RunReader) -> None:
        self._store = store

    async def get(self, run_id: str) -> RunView:
        loaded = await self._store.load(run_id)
        if loaded is None:
            raise RunNotFound(f"run {run_id} does not exist", run_id=run_id)
        return view(loaded, await self._store.queue_position(loaded.run))

    async def list_runs(
        self,
        run_filter: RunFilter,
        display_states: frozenset[DisplayState],
        page_size: int,
        page_token: str,
    ) -> tuple[list[RunView], str]:
        size = page_size_of(page_size)
        binding = _binding(
            run_filter.project_id,
            run_filter.owner_id,
            run_filter.agent_id,
            sorted(run_filter.statuses),
            sorted(display_states),
            run_filter.task_id,
            run_filter.created_from_ms,
            run_filter.created_to_ms,
            run_filter.text,
        )
        cursor = None
        if page_token:
            token = decode_token(page_token, binding)
            cursor = RunCursor(_field(token, "c", int), _field(token, "i", str))
        views: list[RunView] = []
        for _ in range(_SCAN_BATCHES):
            batch = await self._store.list_runs(run_filter, cursor, size + 1)
            for i, loaded in enumerate(batch):
                cursor = RunCursor(loaded.run.created_at_ms, loaded.run.id)
                candidate = view(loaded)
                if not display_states or candidate.display.state in display_states:
                    views.append(candidate)
                if len(views) == size:
                    more = i < len(batch) - 1 or len(batch) == size + 1
                    return await self._positioned(views), self._token(cursor, binding, more)
            if len(batch) < size + 1:
                return await self._positioned(views), ""
        # Scanned enough without filling the page: hand back where the scan stopped (AIP-158
        # allows a short page with a next token).
        return await self._positioned(views), self._token(cursor, binding, True)

    async def count_runs(self, run_filter: RunFilter) -> tuple[dict[DisplayState, int], bool]:
        """How many runs that match are in each display state, and whether every match was
        counted. The display state is the domain's (explain), never a guess in SQL, so the
        count reads the runs; past COUNT_SCAN_CAP it stops and says so (the newest counted)."""
        counts: dict[DisplayState, int] = {}
        cursor: RunCursor | None = None
        seen = 0
        while seen < COUNT_SCAN_CAP:
            batch = await self._store.list_runs(run_filter, cursor, COUNT_BATCH)
            for loaded in batch:
                state = explain(loaded.run, loaded.attempt).state
                counts[state] = counts.get(state, 0) + 1
            seen += len(batch)
            if len(batch) < COUNT_BATCH:
                return counts, True
            last = batch[-1].run
            cursor = RunCursor(last.created_at_ms, last.id)
        return counts, False

    @staticmethod
    def _token(cursor: RunCursor | None, binding: str, more: bool) -> str:
        if not more or cursor is None:
            return ""
        return encode_token({"c": cursor.created_at_ms, "i": cursor.run_id, "b": binding})

    async def _positioned(self, views: list[RunView]) -> list[RunView]:
        out = []
        for v in views:
            position = await self._store.queue_position(v.run)
            out.append(RunView(v.run, v.attempt, v.display, position))
        return out

    async def events(
        self, run_id: str, after_sequence: int, page_size: int, page_token: str
    ) -> tuple[Sequence[RunEvent], str]:
        if after_sequence < 0:
            raise InvalidArgument("after_sequence must not be negative")
        size = page_size_of(page_size)
        binding = _binding(run_id)
        if page_token:
            after_sequence = _field(decode_token(page_token, binding), "s", int)
        if await self._store.load(run_id) is None:
            raise RunNotFound(f"run {run_id} does not exist", run_id=run_id)
        events = await self._store.list_events(run_id, after_sequence, size + 1)
        if len(events) > size:
            events = events[:size]
            return events, encode_token({"s": events[-1].sequence, "b": binding})
        return events, ""

    async def project_events(
        self, project_id: str, after_cursor: str, page_size: int
    ) -> tuple[Sequence[RunEvent], str]:
        """A page of the project's stream and the cursor to continue from (docs/events.md)."""
        if page_size < 0:
            raise InvalidArgument("page_size must not be negative")
        size = min(page_size or PROJECT_EVENTS_PAGE_SIZE, PROJECT_EVENTS_MAX_PAGE_SIZE)
        after = EventCursor.parse(after_cursor)
        events = await self._store.list_project_events(project_id, after, size)
        return events, _cursor_of(events[-1]) if events else after_cursor

    async def event_cursor(self) -> str:
        """The stream's position now (docs/events.md): every stable event is at or before it,
        and every later commit sorts after it; '' when there is none yet."""
        cursor = await self._store.last_event_cursor()
        return cursor.encode() if cursor is not None else ""

    async def attempts(self, run_id: str) -> Sequence[Attempt]:
        attempts = await self._store.list_attempts(run_id)
        # A run always has its first attempt, so none means no such run; confirm before saying so.
        if not attempts and await self._store.load(run_id) is None:
            raise RunNotFound(f"run {run_id} does not exist", run_id=run_id)
        return sorted(attempts, key=lambda a: a.attempt_no)


def _cursor_of(event: RunEvent) -> str:
    assert event.cursor is not None, "events read from the store carry their cursor"
    return event.cursor.encode()
