"""The owner's side of the notices outbox (docs/long-tasks.md "Notices"): their notices
and the deliveries' state, read; a webhook subscription registered (the same URL again
rotates its secret). The secret is derived from TRUERUN_WEBHOOK_KEY and the subscription
(``webhook_secret``) and returned once; nothing stores it."""

from __future__ import annotations

from collections.abc import Callable

from coordinator.domain.model import Actor
from coordinator.service.transitions import Transitions
from kernel.errors import NoticeWebhookNotAllowed
from kernel.ids import now_ms, uuid7
from kernel.webhook_signing import derive_secret
from longtasks.service.webhook_guard import WebhookGuard
from longtasks.store.notice_sql import Delivery, NoticeStatements, StoredNotice, Webhook

PURPOSE = "truerun-notice-webhook"


def webhook_secret(key: bytes, webhook: Webhook) -> str:
    """The subscription's signing secret: derivable only with the server's key."""
    return derive_secret(key, PURPOSE, webhook.project_id, webhook.id, str(webhook.generation))


class NoticeDesk:
    def __init__(
        self,
        transitions: Transitions,
        sql: NoticeStatements,
        key: bytes | None,
        clock: Callable[[], int] = now_ms,
        new_id: Callable[[], str] = uuid7,
        guard: WebhookGuard | None = None,
    ) -> None:
        """``key``: TRUERUN_WEBHOOK_KEY (None: no webhooks can be registered); ``guard``:
        the URLs it may post to (TRUERUN_NOTICE_WEBHOOK_ALLOW)."""
        self._guard = guard or WebhookGuard()
        self._transitions = transitions
        self._sql = sql
        self._key = key
        self._clock = clock
        self._new_id = new_id

    @property
    def webhooks_configured(self) -> bool:
        return self._key is not None

    async def register(
        self, project_id: str, owner_id: str, url: str, actor: Actor
    ) -> tuple[Webhook, str]:
        """The subscription as stored and its secret (shown this once). A URL the server
        does not post to is refused (``NOTICE_WEBHOOK_NOT_ALLOWED``), nothing stored."""
        assert self._key is not None
        refused = await self._guard.refusal(url)
        if refused is not None:
            raise NoticeWebhookNotAllowed(
                f"the server does not post notices to this URL: {refused}", field="url"
            )
        asked = Webhook(
            id=self._new_id(),
            project_id=project_id,
            owner_id=owner_id,
            url=url,
            generation=1,
            created_by=f"{actor.type.value}:{actor.id}"[:256],
            created_at_ms=self._clock(),
        )
        async with self._transitions.transaction([]) as tx:
            stored = await self._sql.register_webhook(tx, asked)
        return stored, webhook_secret(self._key, stored)

    async def notices(
        self, project_id: str, owner_id: str, after: tuple[int, str], limit: int
    ) -> list[StoredNotice]:
        return await self._sql.notices(project_id, owner_id, after, limit)

    async def deliveries(
        self, project_id: str, owner_id: str, notice_id: str, limit: int
    ) -> list[Delivery]:
        return await self._sql.deliveries(project_id, owner_id, notice_id, limit)
