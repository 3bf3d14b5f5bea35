"""32 concurrent writers on one run on real PostgreSQL: one winner per version, no orphan event."""

from __future__ import annotations

import asyncio

import asyncpg

from coordinator.domain import commands as c
from coordinator.domain.states import RunStatus
from coordinator.service.transitions import Transitions
from coordinator.store.postgres import PostgresStore
from kernel.db.migrate import upgrade
from kernel.errors import VersionConflict
from tests.support.factories import SCHEDULER, spec

WRITERS = 32
ROUNDS = 25


def _next_command(status: RunStatus, run_id: str, version: int, writer: int) -> c.RunCommand:
    if status is RunStatus.QUEUED:
        return c.Claim(run_id, SCHEDULER, version, runtime_instance_id=f"writer-{writer}")
    return c.ReleaseBeforeFence(run_id, SCHEDULER, version, reason=f"writer-{writer}")


async def test_32_writers_one_winner_per_version(pg_url: str) -> None:
    await upgrade(pg_url)
    store = await PostgresStore.connect(pg_url, min_size=WRITERS, max_size=WRITERS + 4)
    try:
        transitions = Transitions(store)
        run_id = (await transitions.create(spec())).run.id
        read_barrier = asyncio.Barrier(WRITERS)
        write_barrier = asyncio.Barrier(WRITERS)
        wins: dict[int, list[int]] = {}
        conflicts: dict[int, int] = {}

        async def writer(n: int) -> None:
            for _ in range(ROUNDS):
                await read_barrier.wait()
                loaded = await store.load(run_id)
                assert loaded is not None
                version = loaded.run.version
                command = _next_command(loaded.run.status, run_id, version, n)
                await write_barrier.wait()  # everyone read the same version; now all write
                try:
                    await transitions.execute(command)
                    wins.setdefault(version, []).append(n)
                except VersionConflict:
                    conflicts[version] = conflicts.get(version, 0) + 1

        await asyncio.gather(*(writer(n) for n in range(WRITERS)))

        assert len(wins) == ROUNDS
        assert all(len(winners) == 1 for winners in wins.values()), wins
        assert all(conflicts[v] == WRITERS - 1 for v in wins), conflicts
        final = await store.load(run_id)
        assert final is not None and final.run.version == 1 + ROUNDS
        events = await store.list_events(run_id, 0, 10_000)
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        # create = 2 events; each claim or release = 2 events; nothing else was written.
        assert len(events) == 2 + 2 * ROUNDS
        # No orphan: each event pair names the winner of its version.
        for version, (winner,) in sorted(wins.items()):
            first = events[2 + 2 * (version - 1)]
            expected = f"writer-{winner}"
            assert expected in (
                first.payload.get("runtime_instance_id"),
                first.payload.get("reason"),
            )
        db = await asyncpg.connect(pg_url)
        try:
            orphans = await db.fetchval(
                "SELECT count(*) FROM run_events e WHERE NOT EXISTS "
                "(SELECT 1 FROM runs r WHERE r.id = e.run_id AND e.sequence <= r.event_sequence)"
            )
            assert orphans == 0
        finally:
            await db.close()
    finally:
        await store.close()
