"""A delegating run store for tests that watch the group commit of creates
(coordinator/service/group_commit.py): which writes reached the store, and a gate that
holds the first ones so that later creates must queue behind them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from coordinator.domain.decide import Decision
from coordinator.store.base import Applied, RequestRecord, RunStore


class Recording:
    """The real store; it records every create write (``("one", 1)`` for a lone write,
    ``("group", n)`` for a group of n) and holds its first ``hold`` writes at a gate."""

    def __init__(self, inner: RunStore, hold: int = 0) -> None:
        self._inner = inner
        self.hold = hold
        self.writes: list[tuple[str, int]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _gate(self) -> None:
        if self.hold > 0:
            self.hold -= 1
            self.entered.set()
            await self.release.wait()

    async def apply(
        self, decision: Decision, dedupe_key: str | None, request: RequestRecord | None
    ) -> Applied:
        await self._gate()
        self.writes.append(("one", 1))
        return await self._inner.apply(decision, dedupe_key, request)

    async def apply_creates(
        self, creates: Sequence[tuple[Decision, RequestRecord | None]]
    ) -> list[Applied]:
        await self._gate()
        self.writes.append(("group", len(creates)))
        return await self._inner.apply_creates(creates)
