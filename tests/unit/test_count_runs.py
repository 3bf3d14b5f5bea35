"""RunQueries.count_runs: the display states of every matching run, read in keyset batches;
at the scan cap it stops and says the count is incomplete (never a silent undercount)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from coordinator.domain.states import DisplayState as D
from coordinator.domain.states import RunStatus as R
from coordinator.service import queries
from coordinator.service.queries import RunQueries
from coordinator.store.base import Loaded, RunCursor, RunFilter
from tests.unit.test_display_state import make_run


class Store:
    """The newest-first listing over a fixed set of runs, as the store pages it."""

    def __init__(self, runs: list[Loaded]) -> None:
        self.runs = sorted(runs, key=lambda x: (x.run.created_at_ms, x.run.id), reverse=True)
        self.calls: list[RunCursor | None] = []

    async def list_runs(
        self, run_filter: RunFilter, after: RunCursor | None, limit: int
    ) -> Sequence[Loaded]:
        self.calls.append(after)
        rows = [
            x
            for x in self.runs
            if after is None
            or (x.run.created_at_ms, x.run.id) < (after.created_at_ms, after.run_id)
        ]
        return rows[:limit]


def runs(n: int, status: R) -> list[Loaded]:
    base = make_run(status, None)
    return [
        Loaded(replace(base, id=f"{status.value}-{i:04d}", created_at_ms=1000 + i), None)
        for i in range(n)
    ]


async def test_counts_every_run_across_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries, "COUNT_BATCH", 4)
    store: Any = Store(runs(5, R.QUEUED) + runs(3, R.FAILED) + runs(2, R.PAUSED))
    counts, complete = await RunQueries(store).count_runs(RunFilter())
    assert counts == {D.QUEUED: 5, D.FAILED: 3, D.PAUSED: 2}
    assert complete is True
    assert len(store.calls) == 3  # 4 + 4 + 2: the short batch ends the scan


async def test_stops_at_the_cap_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries, "COUNT_BATCH", 4)
    monkeypatch.setattr(queries, "COUNT_SCAN_CAP", 8)
    store: Any = Store(runs(12, R.QUEUED))
    counts, complete = await RunQueries(store).count_runs(RunFilter())
    assert counts == {D.QUEUED: 8} and complete is False
