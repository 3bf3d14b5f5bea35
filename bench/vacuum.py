"""Each side's database vacuumed after its warm-up, before the clock starts.

PostgreSQL vacuums by itself by default (autovacuum). A server configured without it (this
machine class's PostgreSQL has ``autovacuum = off``, a CI setting) keeps every dead row
version of every round, so each round of a side pays for the ones before it: more heap and
index pages to read past. Measured on such a server, truerun's PostgreSQL CPU per run rose
from 1.1 to 1.9 ms over three rounds and pgqueuer's rate fell from 1,730 to 1,400 jobs/s.
A ``VACUUM`` of the side's database right before each measured part (``Vacuumed`` wraps the
round's window, whose ``begin`` every side calls after its warm-up), every side alike, makes
each round measure what a server with autovacuum keeping up would see. Plain ``VACUUM``, no
``ANALYZE``: statistics taken of a side's tables while they are nearly empty gave one peer a
plan 7x slower for a whole round, and a server with autovacuum would analyze only as they grow.
"""

from __future__ import annotations

from collections.abc import Iterable

import asyncpg

from bench.peers.base import Window


async def announce(urls: Iterable[str]) -> None:
    """Say that the sides' databases are vacuumed, and whether the server would do it."""
    postgres = [url for url in urls if not url.startswith("sqlite:")]
    if not postgres:
        return
    conn = await asyncpg.connect(postgres[0])
    try:
        autovacuum = str(await conn.fetchval("SHOW autovacuum"))
    finally:
        await conn.close()
    print(
        "every side's database vacuumed after its warm-up (bench/vacuum.py);"
        f" the server's autovacuum: {autovacuum}"
    )


async def vacuum(url: str) -> None:
    """``VACUUM`` every table of the database at ``url`` (nothing for SQLite)."""
    if url.startswith("sqlite:"):
        return
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("VACUUM")
    finally:
        await conn.close()


class Vacuumed:
    """A round's window that vacuums the side's database first (outside the clock)."""

    def __init__(self, inner: Window, url: str) -> None:
        self.inner = inner
        self.url = url

    async def begin(self, exclude: Iterable[int] = ()) -> None:
        await vacuum(self.url)
        await self.inner.begin(exclude)

    async def end(self) -> None:
        await self.inner.end()
