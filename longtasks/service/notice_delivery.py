"""Posting the notices outbox to the owners' webhooks (docs/long-tasks.md "Notices"): a loop
beside the long-task watcher, run by every reconciler replica and by `truerun dev`, with no
leader. Each round

1. claims the due pending deliveries in one transaction (PostgreSQL ``FOR UPDATE SKIP
   LOCKED``: replicas never claim one row twice), counting the try and holding each row for
   ``CLAIM_MS`` (a sender that dies mid-post leaves a counted try, due again afterwards);
2. posts each notice as JSON with ``Truerun-Signature: t=<ms>,v1=<hmac>`` (HMAC-SHA256 over
   ``"<t>.<delivery id>.<body>"`` with the subscription's derived secret,
   kernel/webhook_signing.py), ``Truerun-Delivery`` and ``Truerun-Notice``;
3. records the outcome compare-and-set on the try count: a 2xx is ``delivered``; anything
   else waits ``retry_after_ms`` (exponential backoff) and is tried again, until the
   ``max_tries``-th failure makes it ``dead`` (the dead letter), visible in the API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from coordinator.service.transitions import Transitions
from kernel.ids import now_ms
from kernel.loops import failed
from kernel.webhook_signing import sign
from longtasks.domain.notices import after_failure, retry_after_ms
from longtasks.service.notices import webhook_secret
from longtasks.service.webhook_guard import WebhookGuard
from longtasks.store.notice_sql import DELIVERED, Due, NoticeStatements, StoredNotice, Webhook

log = logging.getLogger(__name__)

CLAIM_MS = 60_000
POST_TIMEOUT_S = 10.0
PER_ROUND = 100
IDLE_S = 1.0


@dataclass(frozen=True, slots=True)
class Posted:
    status: int | None  # the receiver's HTTP status (None: no answer)
    error: str = ""


Post = Callable[[str, bytes, dict[str, str]], Awaitable[Posted]]


def body_of(notice: StoredNotice, delivery_id: str) -> bytes:
    """The JSON a webhook receives."""
    payload = {
        "delivery_id": delivery_id,
        "notice": {
            "id": notice.id,
            "kind": notice.kind,
            "project_id": notice.project_id,
            "owner_id": notice.owner_id,
            "long_task_id": notice.task_id,
            "handle": f"#{notice.handle}",
            "decision_id": notice.decision_id or "",
            "task_state": notice.task_state,
            "etag": str(notice.task_version),
            "title": notice.title,
            "text": notice.text,
            "create_time_ms": notice.created_at_ms,
            "source_run_id": notice.source_run_id or "",
            "source_ref": notice.source_ref,
            "command": notice.command,
        },
    }
    return json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a new target: a 3xx is a failed try (the subscription
    names the one URL the owner registered)."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


async def post_http(url: str, body: bytes, headers: dict[str, str]) -> Posted:
    """POST with the standard library in a worker thread (no redirect is followed)."""

    def send() -> Posted:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with _OPENER.open(request, timeout=POST_TIMEOUT_S) as answer:
                return Posted(int(answer.status))
        except urllib.error.HTTPError as error:
            return Posted(int(error.code), f"HTTP {error.code}")
        except (OSError, ValueError) as error:
            return Posted(None, f"{type(error).__name__}: {error}")

    return await asyncio.to_thread(send)


class NoticeDelivery:
    def __init__(
        self,
        transitions: Transitions,
        sql: NoticeStatements,
        key: bytes,
        max_tries: int = 8,
        retry_base_ms: int = 1000,
        post: Post = post_http,
        clock: Callable[[], int] = now_ms,
        on_outcome: Callable[[str], None] | None = None,
        guard: WebhookGuard | None = None,
    ) -> None:
        self._guard = guard or WebhookGuard()
        self._transitions = transitions
        self._sql = sql
        self._key = key
        self._max_tries = max_tries
        self._retry_base_ms = retry_base_ms
        self._post = post
        self._clock = clock
        self._on_outcome = on_outcome

    async def run_once(self) -> dict[str, int]:
        """One round: how many deliveries were delivered, retried and dead-lettered."""
        now = self._clock()
        claimed: list[tuple[Due, int]] = []
        async with self._transitions.transaction([]) as tx:
            for due in await self._sql.due(tx, now, PER_ROUND):
                if await self._sql.claim(tx, due.delivery, now + CLAIM_MS):
                    claimed.append((due, due.delivery.tries + 1))
        counts = {"delivered": 0, "retry": 0, "dead": 0}
        for due, tries in claimed:
            outcome = await self._deliver(due, tries)
            counts[outcome] = counts.get(outcome, 0) + 1
            if self._on_outcome is not None:
                self._on_outcome(outcome)
        return counts

    async def _deliver(self, due: Due, tries: int) -> str:
        delivery = due.delivery
        body = body_of(due.notice, delivery.id)
        secret = webhook_secret(self._key, _webhook_of(due))
        headers = {
            "Content-Type": "application/json",
            "Truerun-Signature": sign(secret, self._clock(), delivery.id, body),
            "Truerun-Delivery": delivery.id,
            "Truerun-Notice": due.notice.id,
            "User-Agent": "truerun-notices",
        }
        refused = await self._guard.refusal(due.url)  # the list or the name may have changed
        if refused is not None:
            posted = Posted(None, f"not posted: {refused}")
        else:
            posted = await self._post(due.url, body, headers)
        now = self._clock()
        if posted.status is not None and 200 <= posted.status < 300:
            state, next_at, delivered, outcome = DELIVERED, now, now, "delivered"
        else:
            state = after_failure(tries, self._max_tries)
            next_at = now + retry_after_ms(tries, self._retry_base_ms)
            delivered, outcome = None, ("dead" if state == "dead" else "retry")
        error = posted.error or ("" if outcome == "delivered" else f"HTTP {posted.status}")
        async with self._transitions.transaction([]) as tx:
            settled = await self._sql.settle(
                tx, delivery.id, tries, state, next_at, posted.status, error, delivered
            )
        if not settled:
            log.info("notice delivery %s was settled by another sender", delivery.id)
        return outcome

    async def serve(self) -> None:
        """Rounds until cancelled; a failed round is logged and the next one tries again."""
        while True:
            try:
                counts = await self.run_once()
            except Exception:  # a database hiccup: next round, never die
                log.exception("notice delivery round failed")
                failed("notice delivery round")
                counts = {}
            if not any(counts.values()):
                await asyncio.sleep(IDLE_S)


def _webhook_of(due: Due) -> Webhook:
    return Webhook(
        id=due.delivery.webhook_id,
        project_id=due.delivery.project_id,
        owner_id=due.delivery.owner_id,
        url=due.url,
        generation=due.generation,
        created_by="",
        created_at_ms=0,
    )
