"""The token usage statements (``ReportUsage``), mixed into ``LongTaskSql`` (whose ``?``
placeholders, backend switch and transaction they share). A usage id is the primary key of
its ``long_task_usage`` row, so a repeated report inserts nothing and is counted once; the
task's running sum (``long_tasks.tokens_used``) moves in the same transaction, and only when
the row was new."""

from __future__ import annotations

from typing import Any

from coordinator.store.base import RunTxReader

_INSERT_USAGE = (
    "INSERT INTO long_task_usage (task_id, usage_id, attempt_id, tokens, recorded_at_ms) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING usage_id"
)
#: Compare-and-set on the task's version like every task update; the version itself does
#: not move (usage is no state change, as a lease renewal is none).
_ADD_TOKENS = (
    "UPDATE long_tasks SET tokens_used = tokens_used + ?, lease_expires_at_ms = ? "
    "WHERE id = ? AND state_version = ? RETURNING tokens_used"
)


class UsageStatements:
    """``record_usage`` and ``add_tokens``; ``LongTaskSql`` supplies ``_q``."""

    def _q(self, sql: str) -> str:
        raise NotImplementedError

    async def record_usage(
        self, tx: RunTxReader, task_id: str, usage_id: str, attempt_id: str, tokens: int, now: int
    ) -> bool:
        """Keep one usage report; False: its usage id was counted already (nothing written)."""
        rows: list[Any] = await tx.fetch(
            self._q(_INSERT_USAGE), task_id, usage_id, attempt_id, tokens, now
        )
        return bool(rows)

    async def add_tokens(
        self, tx: RunTxReader, task_id: str, version: int, tokens: int, lease_expires_at_ms: int
    ) -> int | None:
        """Add ``tokens`` to the task at ``version`` and renew its lease: the new sum (None:
        the task is at another version, nothing written)."""
        rows: list[Any] = await tx.fetch(
            self._q(_ADD_TOKENS), tokens, lease_expires_at_ms, task_id, version
        )
        return int(rows[0]["tokens_used"]) if rows else None
