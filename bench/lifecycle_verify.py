"""The lifecycle benchmark's check of truerun's side: every run it created succeeded, none
is in another state, read from the database itself (PostgreSQL or the embedded SQLite)."""

from __future__ import annotations

import sqlite3

import asyncpg

from bench.ingest import OWNER

_COUNTS = (
    "SELECT count(*) FILTER (WHERE status = 'succeeded'),"
    " count(*) FILTER (WHERE status <> 'succeeded') FROM runs WHERE owner_id = {owner}"
)


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


async def verify(url: str, expected: int) -> str:
    if url.startswith("sqlite:"):
        with sqlite3.connect(sqlite_path(url)) as db:
            row = db.execute(_COUNTS.format(owner="?"), (OWNER,)).fetchone()
        succeeded, other = int(row[0]), int(row[1])
    else:
        connection = await asyncpg.connect(url)
        try:
            row = await connection.fetchrow(_COUNTS.format(owner="$1"), OWNER)
        finally:
            await connection.close()
        assert row is not None
        succeeded, other = int(row[0]), int(row[1])
    if succeeded != expected or other:
        return (
            f"MISMATCH: truerun: {succeeded} runs succeeded of {expected}, {other} in another state"
        )
    return f"checked: truerun: {succeeded} runs succeeded, none in another state"
