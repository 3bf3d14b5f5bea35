"""The notices outbox's statements (docs/long-tasks.md "Notices"), mixed into ``LongTaskSql``
(``sql.py``), whose ``?`` placeholders and backend switch they share. A notice and its
deliveries are written only in the transaction of the long-task change they tell about;
the notice's dedupe key is unique, so a second writer of the same fact inserts nothing.

The delivery loop claims due rows in a transaction of its own (PostgreSQL: ``FOR UPDATE
SKIP LOCKED``, so replicas never claim one row twice; SQLite's single writer serializes),
counts the try and moves the row's ``next_at_ms`` past the claim, then records the outcome
compare-and-set on the try count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.store.base import RunTxReader as Tx


@dataclass(frozen=True, slots=True)
class StoredNotice:
    id: str
    task_id: str
    project_id: str
    owner_id: str
    handle: int
    kind: str
    dedupe_key: str
    decision_id: str | None
    task_state: str
    task_version: int
    title: str
    text: str
    created_at_ms: int
    source_run_id: str | None = None
    source_ref: str = ""
    command: str = ""


@dataclass(frozen=True, slots=True)
class Webhook:
    id: str
    project_id: str
    owner_id: str
    url: str
    generation: int
    created_by: str
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str
    notice_id: str
    webhook_id: str
    project_id: str
    owner_id: str
    state: str  # pending | delivered | dead
    tries: int
    next_at_ms: int
    last_status: int | None
    last_error: str
    delivered_at_ms: int | None
    created_at_ms: int


NOTICE = tuple(StoredNotice.__slots__)
WEBHOOK = tuple(Webhook.__slots__)
DELIVERY = tuple(Delivery.__slots__)
PENDING, DELIVERED, DEAD = "pending", "delivered", "dead"


def _c(columns: tuple[str, ...], prefix: str = "") -> str:
    return ", ".join(prefix + c for c in columns)


def _marks(columns: tuple[str, ...]) -> str:
    return ", ".join("?" for _ in columns)


_INSERT_NOTICE = (
    f"INSERT INTO long_task_notices ({_c(NOTICE)}) VALUES ({_marks(NOTICE)}) "
    "ON CONFLICT (dedupe_key) DO NOTHING RETURNING id"
)
_WEBHOOKS_OF = (
    f"SELECT {_c(WEBHOOK)} FROM long_task_notice_webhooks WHERE project_id = ? AND owner_id = ? "
    "ORDER BY created_at_ms, id"
)
_INSERT_DELIVERY = (
    f"INSERT INTO long_task_notice_deliveries ({_c(DELIVERY)}) VALUES ({_marks(DELIVERY)})"
)
#: Registering the same URL again rotates its secret (a new generation), shown once more.
_REGISTER = (
    f"INSERT INTO long_task_notice_webhooks ({_c(WEBHOOK)}) VALUES ({_marks(WEBHOOK)}) "
    "ON CONFLICT (project_id, owner_id, url) DO UPDATE SET "
    "generation = long_task_notice_webhooks.generation + 1 "
    f"RETURNING {_c(WEBHOOK)}"
)
#: An owner's notices in a project, oldest first, strictly after a cursor
#: (``created_at_ms``, ``id``).
_NOTICES = (
    f"SELECT {_c(NOTICE)} FROM long_task_notices WHERE project_id = ? AND owner_id = ? "
    "AND (created_at_ms > ? OR (created_at_ms = ? AND id > ?)) "
    "ORDER BY created_at_ms, id LIMIT ?"
)
_NOTICES_OF_TASK = (
    f"SELECT {_c(NOTICE)} FROM long_task_notices WHERE task_id = ? ORDER BY created_at_ms, id"
)
_DELIVERIES = (
    f"SELECT {_c(DELIVERY)} FROM long_task_notice_deliveries WHERE project_id = ? "
    "AND owner_id = ? AND (? = '' OR notice_id = ?) ORDER BY created_at_ms, id LIMIT ?"
)
_DUE = (
    f"SELECT {_c(DELIVERY, 'd.')}, {', '.join(f'n.{c} AS n_{c}' for c in NOTICE)}, "
    "w.url AS w_url, w.generation AS w_generation "
    "FROM long_task_notice_deliveries d "
    "JOIN long_task_notices n ON n.id = d.notice_id "
    "JOIN long_task_notice_webhooks w ON w.id = d.webhook_id "
    "WHERE d.state = 'pending' AND d.next_at_ms <= ? ORDER BY d.next_at_ms, d.id LIMIT ?"
)
_CLAIM = (
    "UPDATE long_task_notice_deliveries SET tries = tries + 1, next_at_ms = ? "
    "WHERE id = ? AND state = 'pending' AND tries = ? RETURNING tries"
)
_SETTLE = (
    "UPDATE long_task_notice_deliveries SET state = ?, next_at_ms = ?, last_status = ?, "
    "last_error = ?, delivered_at_ms = ? WHERE id = ? AND state = 'pending' AND tries = ? "
    "RETURNING id"
)


@dataclass(frozen=True, slots=True)
class Due:
    """A delivery claimed for one try, with what it sends and where."""

    delivery: Delivery
    notice: StoredNotice
    url: str
    generation: int


def _notice(row: Any, prefix: str = "") -> StoredNotice:
    values = {c: row[prefix + c] for c in NOTICE[1:]}
    return StoredNotice(id=row[prefix + "id"], **values)


class NoticeStatements:
    """The outbox's reads and writes; ``LongTaskSql`` supplies ``_q`` and ``_fetch``."""

    _postgres: bool

    def _q(self, sql: str) -> str:
        raise NotImplementedError

    async def _fetch(self, tx: Tx | None, sql: str, *args: Any) -> list[Any]:
        raise NotImplementedError

    async def insert_notice(self, tx: Tx, notice: StoredNotice) -> bool:
        """False: a notice with its dedupe key exists already (nothing written)."""
        rows = await self._fetch(tx, _INSERT_NOTICE, *(getattr(notice, c) for c in NOTICE))
        return bool(rows)

    async def webhooks_of(self, tx: Tx | None, project_id: str, owner_id: str) -> list[Webhook]:
        rows = await self._fetch(tx, _WEBHOOKS_OF, project_id, owner_id)
        return [Webhook(**{c: row[c] for c in WEBHOOK}) for row in rows]

    async def insert_delivery(self, tx: Tx, delivery: Delivery) -> None:
        await self._fetch(tx, _INSERT_DELIVERY, *(getattr(delivery, c) for c in DELIVERY))

    async def register_webhook(self, tx: Tx, webhook: Webhook) -> Webhook:
        """The subscription as stored (the same URL again: its generation moved on)."""
        rows = await self._fetch(tx, _REGISTER, *(getattr(webhook, c) for c in WEBHOOK))
        return Webhook(**{c: rows[0][c] for c in WEBHOOK})

    async def notices(
        self, project_id: str, owner_id: str, after: tuple[int, str], limit: int
    ) -> list[StoredNotice]:
        at, last = after
        rows = await self._fetch(None, _NOTICES, project_id, owner_id, at, at, last, limit)
        return [_notice(row) for row in rows]

    async def notices_of_task(self, task_id: str) -> list[StoredNotice]:
        return [_notice(row) for row in await self._fetch(None, _NOTICES_OF_TASK, task_id)]

    async def deliveries(
        self, project_id: str, owner_id: str, notice_id: str, limit: int
    ) -> list[Delivery]:
        rows = await self._fetch(
            None, _DELIVERIES, project_id, owner_id, notice_id, notice_id, limit
        )
        return [Delivery(**{c: row[c] for c in DELIVERY}) for row in rows]

    async def due(self, tx: Tx, now: int, limit: int) -> list[Due]:
        """Pending deliveries due at ``now``, locked (PostgreSQL: those another replica
        holds are skipped)."""
        sql = _DUE + (" FOR UPDATE OF d SKIP LOCKED" if self._postgres else "")
        rows = await self._fetch(tx, sql, now, limit)
        return [
            Due(
                Delivery(**{c: row[c] for c in DELIVERY}),
                _notice(row, "n_"),
                str(row["w_url"]),
                int(row["w_generation"]),
            )
            for row in rows
        ]

    async def claim(self, tx: Tx, delivery: Delivery, until_ms: int) -> bool:
        """Count one try and hold the row until ``until_ms`` (a crashed sender's try is
        counted, and the row is due again then)."""
        return bool(await self._fetch(tx, _CLAIM, until_ms, delivery.id, delivery.tries))

    async def settle(
        self,
        tx: Tx,
        delivery_id: str,
        tries: int,
        state: str,
        next_at_ms: int,
        status: int | None,
        error: str,
        delivered_at_ms: int | None,
    ) -> bool:
        rows = await self._fetch(
            tx, _SETTLE, state, next_at_ms, status, error[:512], delivered_at_ms, delivery_id, tries
        )
        return bool(rows)
