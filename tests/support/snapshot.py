"""Every row of every truerun table, read straight from the database (not through the store)."""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg

from kernel.db.schema import metadata

Snapshot = dict[str, list[tuple[Any, ...]]]


async def snapshot(database_url: str) -> Snapshot:
    tables = [t.name for t in metadata.sorted_tables]
    out: Snapshot = {}
    if database_url.startswith("sqlite:///"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            for table in tables:
                out[table] = sorted(
                    tuple(row) for row in conn.execute(f"SELECT * FROM {table}").fetchall()
                )
        finally:
            conn.close()
        return out
    pg = await asyncpg.connect(database_url)
    try:
        for table in tables:
            rows = await pg.fetch(f"SELECT * FROM {table}")
            out[table] = sorted(tuple(row.values()) for row in rows)
    finally:
        await pg.close()
    return out
