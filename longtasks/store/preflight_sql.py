"""The activation statements (docs/long-tasks.md "Activation and promotion"), mixed into
``LongTaskSql`` (whose ``?`` placeholders and backend switch they share). ``run_preflights``
keeps at most one row per run and side-effect tier (its primary key): a second ask of the
same tier inserts nothing; its verdict is written once, only onto a row that has none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.store.base import RunTxReader
from longtasks.domain.states import TASK_TERMINAL

_COLUMNS = "run_id, tier, verdict, path, reason, confidence, requested_at_ms, decided_at_ms"
_PREFLIGHTS = f"SELECT {_COLUMNS} FROM run_preflights WHERE run_id = ? ORDER BY requested_at_ms"
_INSERT_PREFLIGHT = (
    "INSERT INTO run_preflights (run_id, tier, reason, requested_at_ms) VALUES (?, ?, '', ?) "
    "ON CONFLICT DO NOTHING RETURNING tier"
)
_DECIDE_PREFLIGHT = (
    "UPDATE run_preflights SET verdict = ?, path = ?, reason = ?, confidence = ?, "
    "decided_at_ms = ? WHERE run_id = ? AND tier = ? AND verdict IS NULL RETURNING tier"
)
_FINISHED = tuple(s.value for s in TASK_TERMINAL)
_UNFINISHED_IN_TX = (
    "SELECT COUNT(*) AS n FROM long_tasks WHERE owner_id = ? "
    f"AND state NOT IN ({', '.join('?' for _ in _FINISHED)})"
)


@dataclass(frozen=True, slots=True)
class PreflightRow:
    run_id: str
    tier: str
    verdict: str | None
    path: str | None
    reason: str
    confidence: float | None
    requested_at_ms: int
    decided_at_ms: int | None


class PreflightStatements:
    """``preflights``, ``insert_preflight``, ``decide_preflight``, ``unfinished_in``;
    ``LongTaskSql`` supplies ``_q``."""

    def _q(self, sql: str) -> str:
        raise NotImplementedError

    async def preflights(self, tx: RunTxReader, run_id: str) -> list[PreflightRow]:
        rows: list[Any] = await tx.fetch(self._q(_PREFLIGHTS), run_id)
        return [
            PreflightRow(
                row["run_id"],
                row["tier"],
                row["verdict"],
                row["path"],
                row["reason"],
                float(row["confidence"]) if row["confidence"] is not None else None,
                int(row["requested_at_ms"]),
                int(row["decided_at_ms"]) if row["decided_at_ms"] is not None else None,
            )
            for row in rows
        ]

    async def insert_preflight(self, tx: RunTxReader, run_id: str, tier: str, now: int) -> bool:
        """Record that ``tier`` was put to a preflight; False: it was already."""
        rows: list[Any] = await tx.fetch(self._q(_INSERT_PREFLIGHT), run_id, tier, now)
        return bool(rows)

    async def decide_preflight(
        self,
        tx: RunTxReader,
        run_id: str,
        tier: str,
        verdict: str,
        path: str,
        reason: str,
        confidence: float | None,
        now: int,
    ) -> bool:
        """The classifier's verdict onto the tier's open preflight; False: no such open row."""
        args = (verdict, path, reason[:1024], confidence, now, run_id, tier)
        rows: list[Any] = await tx.fetch(self._q(_DECIDE_PREFLIGHT), *args)
        return bool(rows)

    async def unfinished_in(self, tx: RunTxReader, owner_id: str) -> int:
        """The owner's unfinished tasks as ``tx`` sees them (a promotion's cap check)."""
        rows: list[Any] = await tx.fetch(self._q(_UNFINISHED_IN_TX), owner_id, *_FINISHED)
        return int(rows[0]["n"])
