"""The statements of short handles and the one action contract (docs/long-tasks.md "One
action contract and short handles"), mixed into ``LongTaskSql`` (``sql.py``), whose one SQL
text per statement, ``?`` placeholders and transaction rules they share. The writes
(``insert_action``) run only in a transaction the door opened, beside the change the
action made; the reads serve the service's resolving of a handle and the text commands.
"""

from __future__ import annotations

from typing import Any

from coordinator.store.base import RunTxReader as Tx
from longtasks.domain.actions import Action, ActionRecord
from longtasks.domain.model import Decision, Task
from longtasks.domain.states import TASK_TERMINAL
from longtasks.store import records as rec
from longtasks.store import rows as r

ACTION = (
    *("task_id", "action_id", "action", "decision_id", "answer", "actor_type", "actor_id"),
    *("task_version", "created_at_ms"),
)
_FINISHED = tuple(sorted(s.value for s in TASK_TERMINAL))
_NOT_FINISHED = f"state NOT IN ({', '.join('?' for _ in _FINISHED)})"

#: The owner's next handle: one more than any it was ever given (the create holds the
#: owner's handle lock, and ``uq_long_tasks_owner_handle`` refuses a second one anyway).
_NEXT_HANDLE = "SELECT COALESCE(MAX(handle), 0) + 1 AS n FROM long_tasks WHERE owner_id = ?"
_BY_HANDLE = f"SELECT {', '.join(r.TASK)} FROM long_tasks WHERE owner_id = ? AND handle = ?"
_UNFINISHED = (
    f"SELECT {', '.join(r.TASK)} FROM long_tasks WHERE project_id = ? AND owner_id = ? "
    f"AND {_NOT_FINISHED} ORDER BY handle"
)
#: The open decisions of an owner's tasks in a project, with their task's handle and etag.
_OPEN_DECISIONS = (
    f"SELECT {', '.join('d.' + c for c in rec.DECISION)}, t.handle AS task_handle "
    "FROM long_task_decisions d JOIN long_tasks t ON t.id = d.task_id "
    "WHERE t.project_id = ? AND t.owner_id = ? AND d.state = 'open' "
    "ORDER BY t.handle, d.created_at_ms, d.id"
)
_INSERT_ACTION = (
    f"INSERT INTO long_task_actions ({', '.join(ACTION)}) "
    f"VALUES ({', '.join('?' for _ in ACTION)}) ON CONFLICT DO NOTHING RETURNING action_id"
)
_ACTION = f"SELECT {', '.join(ACTION)} FROM long_task_actions WHERE task_id = ? AND action_id = ?"
#: An action id kept on any of an owner's tasks in a project (a redelivered chat message).
_ACTION_OF_OWNER = (
    f"SELECT {', '.join('a.' + c for c in ACTION)}, t.handle AS task_handle "
    "FROM long_task_actions a JOIN long_tasks t ON t.id = a.task_id "
    "WHERE t.project_id = ? AND t.owner_id = ? AND a.action_id = ? "
    "ORDER BY a.created_at_ms LIMIT 1"
)


class ActionTaken(Exception):
    """The action id was kept already (by a concurrent request): nothing was written."""


class ActionStatements:
    """Mixed into ``LongTaskSql``, which provides the two primitives below."""

    async def _fetch(self, tx: Tx | None, sql: str, *args: Any) -> list[Any]:
        raise NotImplementedError

    def _q(self, sql: str) -> str:
        raise NotImplementedError

    async def next_handle(self, tx: Tx, owner_id: str) -> int:
        rows = await self._fetch(tx, _NEXT_HANDLE, owner_id)
        return int(rows[0]["n"])

    async def task_by_handle(self, owner_id: str, handle: int) -> Task | None:
        rows = await self._fetch(None, _BY_HANDLE, owner_id, handle)
        return r.task_from_row(rows[0]) if rows else None

    async def unfinished_of(self, project_id: str, owner_id: str) -> list[Task]:
        """The owner's tasks in the project that have not ended, by handle."""
        rows = await self._fetch(None, _UNFINISHED, project_id, owner_id, *_FINISHED)
        return [r.task_from_row(row) for row in rows]

    async def open_decisions_of(self, project_id: str, owner_id: str) -> list[tuple[int, Decision]]:
        """Every open decision of the owner's tasks in the project, with its task's handle."""
        rows = await self._fetch(None, _OPEN_DECISIONS, project_id, owner_id)
        return [(int(row["task_handle"]), rec.decision_from_row(row)) for row in rows]

    async def insert_action(self, tx: Tx, record: ActionRecord) -> None:
        """Keep an action by its id, in the transaction of its change; ``ActionTaken`` when
        the id is kept already (the whole transaction then rolls back)."""
        values = _action_values(record)
        if not await tx.fetch(self._q(_INSERT_ACTION), *(values[c] for c in ACTION)):
            raise ActionTaken(record.action_id)

    async def action_of_owner(
        self, project_id: str, owner_id: str, action_id: str
    ) -> tuple[int, ActionRecord] | None:
        """The action kept with ``action_id`` on one of the owner's tasks in the project,
        with that task's handle."""
        rows = await self._fetch(None, _ACTION_OF_OWNER, project_id, owner_id, action_id)
        return (int(rows[0]["task_handle"]), _action_from_row(rows[0])) if rows else None

    async def action(self, task_id: str, action_id: str) -> ActionRecord | None:
        rows = await self._fetch(None, _ACTION, task_id, action_id)
        return _action_from_row(rows[0]) if rows else None


def _action_values(record: ActionRecord) -> dict[str, Any]:
    return {
        "task_id": record.task_id,
        "action_id": record.action_id,
        "action": record.action.value,
        "decision_id": record.decision_id,
        "answer": record.answer,
        "actor_type": record.actor_type,
        "actor_id": record.actor_id,
        "task_version": record.task_version,
        "created_at_ms": record.created_at_ms,
    }


def _action_from_row(row: Any) -> ActionRecord:
    return ActionRecord(
        task_id=row["task_id"],
        action_id=row["action_id"],
        action=Action(row["action"]),
        decision_id=row["decision_id"],
        answer=row["answer"],
        actor_type=row["actor_type"],
        actor_id=row["actor_id"],
        task_version=int(row["task_version"]),
        created_at_ms=int(row["created_at_ms"]),
    )
