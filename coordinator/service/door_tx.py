"""What the one door (``coordinator/service/transitions.py``) hands out: the ``Result`` of a
transition, and ``DoorTx``, a transaction opened through the door that reads, locks and scans
but writes only through the door's own methods."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.domain.model import Attempt, Run, RunEvent
from coordinator.store.base import Loaded, RunTx, Scan

DEDUPLICATED = "deduplicated"


@dataclass(frozen=True, slots=True)
class Result:
    outcome: str  # an Outcome value, or DEDUPLICATED when the dedupe key was already used
    run: Run
    attempt: Attempt | None
    events: tuple[RunEvent, ...] = ()
    existing: bool = False  # CreateRun matched an idempotency key
    from_status: str = ""  # the run's status before (empty for a new run)


class DoorTx:
    """A transaction opened through the door (``Transitions.transaction``): it reads, locks
    and scans (``RunTxReader``); its writes are commands decided in it
    (``Transitions.execute_in``) and the AIP-155 record (``Transitions.record_request_in``).
    The raw transaction, which could write a decision nobody checked, stays inside."""

    __slots__ = ("_tx",)

    def __init__(self, tx: RunTx) -> None:
        self._tx = tx

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        return await self._tx.load(run_id, attempt_id, dedupe_key)

    async def load_runs(self, run_ids: Sequence[str]) -> dict[str, Loaded]:
        return await self._tx.load_runs(run_ids)

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """A statement in the backend's own dialect: capacity's queries and its own tables
        (scripts/architecture.py keeps SQL that writes a run table in coordinator/store)."""
        return await self._tx.fetch(sql, *args)

    async def lock(self, lock_keys: Sequence[str]) -> None:
        await self._tx.lock(lock_keys)

    async def open_runs_in_scope(self, scope: str) -> list[str]:
        return await self._tx.open_runs_in_scope(scope)

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None:
        return await self._tx.find_by_idempotency_key(project_id, key)

    async def lock_scan(
        self, scan: Scan, mark_ms: int, skip: Sequence[str], limit: int
    ) -> Sequence[Attempt]:
        return await self._tx.lock_scan(scan, mark_ms, skip, limit)
