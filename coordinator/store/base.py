"""The store protocol every backend implements, and the values it trades in."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from coordinator.domain.cursor import EventCursor
from coordinator.domain.decide import Decision
from coordinator.domain.model import Attempt, Run, RunEvent
from coordinator.domain.output import Stored
from coordinator.domain.states import RunStatus


class CasMiss(Exception):
    """The run version (or the attempt status/sequence) moved since it was read."""


class DedupeKeyTaken(Exception):
    """Another transaction committed the same dedupe key first."""


class RequestIdTaken(Exception):
    """A concurrent request with the same request_id committed first."""


class IdempotencyKeyTaken(Exception):
    """Another run of the project already holds this idempotency key."""


class GrantTaken(Exception):
    """This approver's grant of the run is already recorded (run_approvals' primary key)."""


@dataclass(frozen=True, slots=True)
class Loaded:
    run: Run
    attempt: Attempt | None
    dedupe_hit: bool = False


@dataclass(frozen=True, slots=True)
class Applied:
    """What was committed: the run with its real event sequence, and the events as stored."""

    run: Run
    attempt: Attempt | None
    events: tuple[RunEvent, ...]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """AIP-155 bookkeeping written in the same transaction as the change it answers, with a
    snapshot of what that transaction committed (``coordinator/store/snapshots.py``)."""

    request_id: str
    method: str
    payload_hash: str


@dataclass(frozen=True, slots=True)
class StoredRequest:
    method: str
    payload_hash: str
    #: ``snapshots.encode`` of what was committed (older records: the answer's bytes).
    snapshot: bytes


@dataclass(frozen=True, slots=True)
class RunFilter:
    project_id: str | None = None
    owner_id: str | None = None
    agent_id: str | None = None
    statuses: frozenset[RunStatus] = field(default_factory=frozenset)
    task_id: str | None = None
    #: Created at or after / before these times (ms since the epoch).
    created_from_ms: int | None = None
    created_to_ms: int | None = None
    #: Lower-case text some identifying column must contain (TEXT_COLUMNS).
    text: str | None = None


#: The columns a RunFilter's text is looked for in: what a person would type to find a run.
TEXT_COLUMNS = ("id", "task_id", "owner_id", "agent_id", "trigger_id", "error_code")


@dataclass(frozen=True, slots=True)
class RunCursor:
    """Keyset position in the newest-first listing."""

    created_at_ms: int
    run_id: str


class Scan(StrEnum):
    """The reconciler's scans over live attempts (docs/state-model.md, reconciler)."""

    EXPIRED_LEASES = "expired_leases"  # lease ran out, not yet marked stale
    SILENT_UNKNOWNS = "silent_unknowns"  # started, stale, lease ran out before the mark
    # running and in sync (an unknown one's silence is the runtime's), no runtime event since
    # the mark, no cancel yet
    QUIET_RUNNING = "quiet_running"


class RunTxReader(Protocol):
    """What a transaction shows a caller outside the store and the transition service (the
    one it gets from ``Transitions.transaction``): reads, locks, scans and the backend's own
    statements for capacity's tables. Every run write in it goes through the door
    (``Transitions.execute_in``, ``Transitions.record_request_in``)."""

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None: ...

    async def load_runs(self, run_ids: Sequence[str]) -> dict[str, Loaded]:
        """Each named run with its current attempt, in one read (missing ones left out)."""
        ...

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """A statement in the backend's own dialect (for the capacity queries)."""
        ...

    async def lock(self, lock_keys: Sequence[str]) -> None:
        """More locks, after those the transaction began with (keep one global order)."""
        ...

    async def open_runs_in_scope(self, scope: str) -> list[str]:
        """Ids of the runs in this execution scope that are not terminal, oldest first."""
        ...

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None:
        """The run holding this key in the project, as this transaction sees it."""
        ...

    async def lock_scan(
        self, scan: Scan, mark_ms: int, skip: Sequence[str], limit: int
    ) -> Sequence[Attempt]:
        """Up to ``limit`` candidates of one reconciler scan (older than ``mark_ms``, ids in
        ``skip`` left out), their attempt and run rows locked until this transaction ends.
        PostgreSQL skips rows another transaction holds (FOR UPDATE SKIP LOCKED), so
        reconciler replicas split the candidates; SQLite's single writer needs nothing."""
        ...


class RunTx(RunTxReader, Protocol):
    """Store operations inside one open transaction; any raise rolls all of it back. Only
    the transition service holds one (callers get it as a ``RunTxReader``)."""

    async def apply(self, decision: Decision, dedupe_key: str | None = None) -> Applied: ...

    async def apply_many(self, decisions: Sequence[Decision]) -> list[Applied]:
        """Decisions on distinct runs, written together (one statement where the backend can),
        answered in the given order; a miss raises CasMiss and aborts the transaction."""
        ...

    async def put_request(self, record: RequestRecord, snapshot: dict[str, Any]) -> None:
        """Keep the AIP-155 record with ``snapshot`` (a JSON object of what this transaction
        committed) in this transaction (RequestIdTaken if a twin won)."""
        ...


class RunReader(Protocol):
    """The store's reads: what queries, feeds, output reads, the dispatcher's and the
    reconciler's scans and the metrics are given. None of these writes."""

    async def load(
        self, run_id: str, attempt_id: str | None = None, dedupe_key: str | None = None
    ) -> Loaded | None:
        """The run and its current attempt (or ``attempt_id``), and whether the key is taken."""

    async def find_by_idempotency_key(self, project_id: str, key: str) -> Loaded | None: ...

    async def get_request(self, request_id: str) -> StoredRequest | None: ...

    async def list_runs(
        self, run_filter: RunFilter, after: RunCursor | None, limit: int
    ) -> Sequence[Loaded]:
        """Newest first, strictly after ``after``."""

    async def list_events(
        self, run_id: str, after_sequence: int, limit: int
    ) -> Sequence[RunEvent]: ...

    async def list_project_events(
        self, project_id: str | None, after: EventCursor | None, limit: int
    ) -> Sequence[RunEvent]:
        """Committed events in cursor order strictly after ``after`` (``None``: from the first),
        of one project or of all (``None``), each with its cursor. Only events no later commit
        can sort before are returned (docs/events.md), so paging by the last cursor never
        skips one. Never writes."""

    async def last_event_cursor(self) -> EventCursor | None:
        """The cursor of the newest event ``list_project_events`` would return now."""

    async def list_attempts(self, run_id: str) -> Sequence[Attempt]: ...

    async def read_output(self, attempt_id: str, offset: int, limit: int) -> Sequence[Stored]:
        """Up to ``limit`` stored pieces of the attempt's output in offset order, from the
        one holding byte ``offset`` on. Never writes."""

    async def load_attempts(self, attempt_ids: Sequence[str]) -> dict[str, Loaded]:
        """Each known attempt with its run, by attempt id (unknown ids are left out)."""

    async def expired_leases(self, now_ms: int, limit: int) -> Sequence[Attempt]:
        """Live attempts whose lease ran out and that are not already marked stale."""

    async def silent_unknowns(self, silent_since_ms: int, limit: int) -> Sequence[Attempt]:
        """Started attempts whose sync is stale and whose lease ran out before
        ``silent_since_ms`` (no heartbeat renewed it since)."""

    async def oldest_non_terminal(self) -> dict[str, int]:
        """Per non-terminal run status, the oldest run's last change (UTC ms)."""

    async def queued_by_project(self) -> dict[str, tuple[int, int]]:
        """Per project with queued runs: how many, and the oldest one's queued_at (UTC ms).
        Reads only queued rows (index ix_runs_status_queued)."""

    async def due_retries(self, updated_before_ms: int, limit: int) -> Sequence[str]:
        """Runs in retry_wait since before ``updated_before_ms``, oldest first."""

    async def started_attempts(self, owner_id: str, runtime_instance_id: str) -> Sequence[Attempt]:
        """The started (fenced, not finished) attempts of this runtime instance."""

    async def queue_position(self, run: Run) -> int:
        """1-based position among the owner's queued runs in claim order; 0 if not queued."""


class RunStore(RunReader, Protocol):
    """The reads and the writes. Only the transition service (``Transitions``, the one write
    door) and the composition root hold a ``RunStore``; every other module is handed a
    ``RunReader`` (scripts/architecture.py checks it)."""

    async def close(self) -> None: ...

    async def apply(
        self, decision: Decision, dedupe_key: str | None, request: RequestRecord | None
    ) -> Applied:
        """Write a decision atomically; raise CasMiss, DedupeKeyTaken or IdempotencyKeyTaken.
        With ``request``, its record is kept in the same transaction with the snapshot of
        what was committed (``snapshots.run_snapshot``); RequestIdTaken if a twin won."""

    async def apply_creates(
        self, creates: Sequence[tuple[Decision, RequestRecord | None]]
    ) -> list[Applied]:
        """Several creates (decisions that insert a run, no dedupe key), each with its
        AIP-155 record or none, in one transaction, all or nothing, answered in the given
        order: the group commit of concurrent CreateRun calls. IdempotencyKeyTaken or
        RequestIdTaken when one of them collides (with a committed run or record, or with
        another of them); CasMiss when another writer deadlocked with it. Nothing was
        written then."""

    def transaction(self, lock_keys: Sequence[str]) -> AbstractAsyncContextManager[RunTx]:
        """One transaction that first takes the named locks, in the order given."""
        ...

    async def delete_output(self, finished_before_ms: int, limit: int) -> int:
        """Retention: delete up to ``limit`` stored pieces of attempts that finished before
        the cutoff; how many were deleted."""

    async def apply_all(self, decisions: Sequence[Decision]) -> list[Applied]:
        """Several decisions (on different runs) in one transaction, all or nothing."""

    async def renew_leases(
        self,
        owner_id: str,
        runtime_instance_id: str,
        attempt_ids: Sequence[str],
        now_ms: int,
        until_ms: int,
        token_until_ms: int = 0,
    ) -> int:
        """A heartbeat from the runtime holding them: extend the leases of those of
        ``attempt_ids`` that are its started (fenced) attempts and stamp heartbeat_at. The
        caller names only what the heartbeat vouches for (coordinator/domain/staleness.py):
        a task the runtime no longer lists must not be kept alive by its heartbeats.
        A claim not yet fenced is the dispatcher's,
        not the runtime's: a heartbeat says nothing about it, and renewing it would keep a
        claim whose dispatcher died out of the reconciler's reach for as long as the runtime
        lives. Touches no state column; returns how many were renewed. The callback token of
        each renewed attempt stays valid until at least ``token_until_ms``: an attempt whose
        runtime keeps vouching for it keeps its authority however long it runs."""

    async def record_lineage(
        self, owner_id: str, runtime_instance_id: str, lineage: str, now_ms: int
    ) -> Sequence[str]:
        """This instance of the owner's ``lineage`` said Hello (its first Hello is kept):
        the instances it replaces, those of the lineage first seen before it and not yet
        marked replaced, oldest first."""

    async def bind_instance(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> str:
        """Bind the instance id to ``owner_id`` unless it is bound already; the owner it is
        bound to (another owner's: the caller refuses the Hello)."""

    async def mark_replaced(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> None:
        """Every started attempt of this replaced instance is settled: not returned again."""
