"""The notice webhooks' URL check at the edge (``longtasks.domain.webhook_allow`` is the
rule): the host is resolved, then the rule reads the URL, the allow list and the
addresses. Called when a webhook is registered and again before every post."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from longtasks.domain.webhook_allow import parse_allow, url_refusal

Resolve = Callable[[str], Awaitable[Sequence[str]]]


async def resolve_host(host: str) -> list[str]:
    """The addresses ``host`` resolves to; none when it does not resolve (then the post
    itself fails, and is counted as a failed try)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


class WebhookGuard:
    def __init__(self, allow: str = "", resolve: Resolve = resolve_host) -> None:
        """``allow``: TRUERUN_NOTICE_WEBHOOK_ALLOW as configured."""
        self._allow = parse_allow(allow)
        self._resolve = resolve

    async def refusal(self, url: str) -> str | None:
        """Why ``url`` is not posted to (None: it may be)."""
        refused = url_refusal(url, self._allow)
        if refused is not None:
            return refused
        host = urlsplit(url).hostname or ""
        return url_refusal(url, self._allow, await self._resolve(host))
