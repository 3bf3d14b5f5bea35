"""The periodic loops of the background scans (retries, leases, output retention): one round,
then a pause; a round that fails is logged and the next one comes anyway, so a database
hiccup never stops a scan for good."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


async def every(interval_s: float, round_: Callable[[], Awaitable[object]], what: str) -> None:
    """Run ``round_`` every ``interval_s`` seconds until cancelled; ``what`` names it in the
    log when a round fails."""
    while True:
        try:
            await round_()
        except Exception:  # a database hiccup: next round, never die
            log.exception("%s failed", what)
        await asyncio.sleep(interval_s)
