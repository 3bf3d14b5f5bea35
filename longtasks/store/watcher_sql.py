"""The watcher's and the scheduler's reads (longtasks/service/watcher.py), beside the door's
statements (``sql.py``, whose one SQL text per statement and ``?`` placeholders they share).
Reads only: the long-task tables are written by the door, the run tables by the
coordinator's store; reading the runs here is how the watcher learns that a run ended."""

from __future__ import annotations

from longtasks.domain.liveness import OpenAttempt
from longtasks.domain.model import Task
from longtasks.domain.states import TASK_LEASED, TASK_TERMINAL
from longtasks.store import rows as r
from longtasks.store.continuation_sql import CONTINUATION_HOLDS
from longtasks.store.sql import LongTaskSql, Tx

_LEASED = tuple(sorted(s.value for s in TASK_LEASED))
_FINISHED = tuple(sorted(s.value for s in TASK_TERMINAL))
_IN_LEASED = f"state IN ({', '.join('?' for _ in _LEASED)})"
_REASONS = ("error_code", "error_summary", "cancel_reason", "termination_reason")

#: One statement, so one consistent snapshot of the attempts and their runs' statuses.
_OPEN_ATTEMPT_RUNS = (
    "SELECT a.task_id, a.id AS attempt_id, a.run_id, r.status, r.error_code, "
    "r.error_summary, r.cancel_reason, ra.termination_reason "
    "FROM long_task_attempts a JOIN runs r ON r.id = a.run_id "
    "LEFT JOIN attempts ra ON ra.id = r.current_attempt_id "
    "WHERE a.ended_at_ms IS NULL ORDER BY a.started_at_ms, a.id"
)
#: The front of every owner's queue (its first ``?`` tasks by creation), owners with all
#: their slots taken left out, so a long queue of a full owner never hides another's; a
#: task its continuation holds (not due yet) is not in the queue.
_QUEUED = (
    f"SELECT {', '.join(r.TASK)} FROM (SELECT {', '.join(r.TASK)}, ROW_NUMBER() OVER "
    "(PARTITION BY owner_id ORDER BY created_at_ms, id) AS place FROM long_tasks "
    f"WHERE state = 'queued' AND NOT {CONTINUATION_HOLDS} "
    "AND owner_id NOT IN (SELECT owner_id FROM long_tasks "
    f"WHERE {_IN_LEASED} GROUP BY owner_id HAVING COUNT(*) >= ?)) q "
    "WHERE place <= ? ORDER BY created_at_ms, id LIMIT ?"
)
_SLOTS_TAKEN = (
    f"SELECT owner_id, COUNT(*) AS n FROM long_tasks WHERE {_IN_LEASED} GROUP BY owner_id"
)
_SLOTS_OF_OWNER = f"SELECT COUNT(*) AS n FROM long_tasks WHERE owner_id = ? AND {_IN_LEASED}"
_UNFINISHED_OF_OWNER = (
    "SELECT COUNT(*) AS n FROM long_tasks WHERE owner_id = ? "
    f"AND state NOT IN ({', '.join('?' for _ in _FINISHED)})"
)


class WatcherSql(LongTaskSql):
    """The door's statements and the watcher's reads, on one backend."""

    async def open_attempt_runs(self) -> list[OpenAttempt]:
        """Every long-task attempt not ended, oldest first, beside its run's status and
        what the run said about its end."""
        return [
            OpenAttempt(
                row["task_id"],
                row["attempt_id"],
                row["run_id"],
                row["status"],
                tuple(str(row[c]) for c in _REASONS if row[c]),
            )
            for row in await self._fetch(None, _OPEN_ATTEMPT_RUNS)
        ]

    async def queued_tasks(self, cap: int, per_owner: int, limit: int) -> list[Task]:
        """Tasks waiting for an attempt, in creation order: of every owner with fewer than
        ``cap`` tasks holding a slot, the first ``per_owner`` of its queue; ``limit`` in all."""
        rows = await self._fetch(None, _QUEUED, *_LEASED, cap, per_owner, limit)
        return [r.task_from_row(row) for row in rows]

    async def slots_taken(self) -> dict[str, int]:
        """Per owner, how many of its tasks hold a concurrency slot (``TaskState.leased``)."""
        rows = await self._fetch(None, _SLOTS_TAKEN, *_LEASED)
        return {row["owner_id"]: int(row["n"]) for row in rows}

    async def slots_of_owner(self, tx: Tx, owner_id: str) -> int:
        """The same for one owner, as ``tx`` sees it (the scheduler holds the owner's lock)."""
        rows = await self._fetch(tx, _SLOTS_OF_OWNER, owner_id, *_LEASED)
        return int(rows[0]["n"])

    async def unfinished_of_owner(self, owner_id: str) -> int:
        """How many of the owner's tasks are not terminal: the create RPC compares it with
        TRUERUN_LONG_TASK_OWNER_MAX_UNFINISHED (``queue.unfinished_cap_refusal``)."""
        rows = await self._fetch(None, _UNFINISHED_OF_OWNER, owner_id, *_FINISHED)
        return int(rows[0]["n"])
