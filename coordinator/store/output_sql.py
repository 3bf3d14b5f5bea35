"""The output store's statements (table attempt_output), in both dialects' placeholders.

Pieces are appended only by the transition that takes an OUTPUT event, in its transaction
(coordinator/domain/output.py); readers page by byte offset; the retention sweep deletes the
pieces of attempts that finished before a cutoff.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.domain.output import ChunkKind, Stored

OUTPUT_COLUMNS = ("attempt_id", "byte_offset", "kind", "text", "created_at_ms")


def read_sql(mark: Callable[[str], str]) -> str:
    """``mark(n)``: the n-th placeholder. Parameters: attempt id, offset, row limit. Starts
    with the piece that holds the offset, so a reader may ask from any byte."""
    attempt, offset, limit = mark("1"), mark("2"), mark("3")
    return f"""
SELECT byte_offset, kind, text FROM attempt_output
WHERE attempt_id = {attempt} AND byte_offset >= COALESCE(
    (SELECT MAX(byte_offset) FROM attempt_output
     WHERE attempt_id = {attempt} AND byte_offset <= {offset}), 0)
ORDER BY byte_offset LIMIT {limit}"""


def delete_sql(mark: Callable[[str], str]) -> str:
    """Parameters: finished-before cutoff (ms), row limit. Deletes at most that many pieces
    of attempts that ended before the cutoff."""
    cutoff, limit = mark("1"), mark("2")
    return f"""
DELETE FROM attempt_output WHERE (attempt_id, byte_offset) IN (
    SELECT o.attempt_id, o.byte_offset FROM attempt_output o
    JOIN attempts a ON a.id = o.attempt_id
    WHERE a.finished_at_ms IS NOT NULL AND a.finished_at_ms < {cutoff}
    LIMIT {limit})"""


def output_rows(pieces: Sequence[Stored], created_at_ms: int) -> list[tuple[Any, ...]]:
    return [(p.attempt_id, p.offset, p.kind.value, p.text, created_at_ms) for p in pieces]


def stored_from_row(attempt_id: str, row: Mapping[str, Any]) -> Stored:
    return Stored(attempt_id, row["byte_offset"], ChunkKind(row["kind"]), row["text"])
