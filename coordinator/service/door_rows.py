"""The rows the door writes beside the state machine: lease renewals, runtime bindings and
lineage, output retention. No transition and no event: nothing there is a run's state, so
each is one store call (the store's own statement), kept behind the door all the same
(scripts/architecture.py lets no other module call a store write)."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.store.base import RunStore


class RowsBeside:
    """Mixed into ``Transitions``; ``_store`` is its store."""

    _store: RunStore

    async def renew_leases(
        self,
        owner_id: str,
        runtime_instance_id: str,
        attempt_ids: Sequence[str],
        now_ms: int,
        until_ms: int,
        token_until_ms: int = 0,
    ) -> int:
        """A heartbeat vouched for these started attempts of its runtime: their leases (and
        callback tokens) last longer. No state column changes (``RunStore.renew_leases``)."""
        return await self._store.renew_leases(
            owner_id, runtime_instance_id, attempt_ids, now_ms, until_ms, token_until_ms
        )

    async def bind_instance(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> str:
        """Bind a runtime instance to its owner at Hello; the owner it is bound to."""
        return await self._store.bind_instance(owner_id, runtime_instance_id, now_ms)

    async def record_lineage(
        self, owner_id: str, runtime_instance_id: str, lineage: str, now_ms: int
    ) -> Sequence[str]:
        """This instance of ``lineage`` said Hello; the earlier instances it replaces."""
        return await self._store.record_lineage(owner_id, runtime_instance_id, lineage, now_ms)

    async def mark_replaced(self, owner_id: str, runtime_instance_id: str, now_ms: int) -> None:
        """A replaced instance's started attempts are all settled: not returned again."""
        await self._store.mark_replaced(owner_id, runtime_instance_id, now_ms)

    async def delete_output(self, finished_before_ms: int, limit: int) -> int:
        """Output retention: delete up to ``limit`` stored output pieces of attempts that
        finished before the cutoff (output, not state: no transition, no event)."""
        return await self._store.delete_output(finished_before_ms, limit)
