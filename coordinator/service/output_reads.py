"""The read side of the output store: a page of an attempt's stored output (ReadRunOutput).

Readers address the output by byte offset in the attempt's stored text and follow it by
asking again from ``next_offset``. Never writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.domain.model import Attempt
from coordinator.domain.output import ChunkKind, Stored, held_shown
from coordinator.store.base import RunReader
from kernel.errors import AttemptNotFound, InvalidArgument, RunNotFound

DEFAULT_BYTES = 64 * 1024
MAX_BYTES = 1024 * 1024
_MAX_ROWS = 512


@dataclass(frozen=True, slots=True)
class OutputPage:
    attempt: Attempt
    pieces: tuple[Stored, ...]
    next_offset: int
    stored_bytes: int
    attempt_finished: bool
    run_finished: bool
    expired: bool


async def read_output(
    store: RunReader, run_id: str, attempt_id: str, offset: int, max_bytes: int
) -> OutputPage:
    if offset < 0:
        raise InvalidArgument("offset must be 0 or more", field="offset")
    if max_bytes < 0:
        raise InvalidArgument("max_bytes must be 0 or more", field="max_bytes")
    limit = min(max_bytes or DEFAULT_BYTES, MAX_BYTES)
    loaded = await store.load(run_id, attempt_id or None)
    if loaded is None:
        raise RunNotFound(f"run {run_id} does not exist", run_id=run_id)
    attempt = loaded.attempt
    if attempt is None:
        if attempt_id:
            raise AttemptNotFound(f"run {run_id} has no attempt {attempt_id}")
        raise RunNotFound(f"run {run_id} has no attempt", run_id=run_id)
    finished = attempt.status.terminal
    rows = await store.read_output(attempt.id, offset, min(_MAX_ROWS, 1 + limit // 512))
    pieces, next_offset = _page(rows, offset, limit)
    stored = attempt.output_stored_bytes
    expired = bool(stored) and offset < stored and not rows
    if expired:
        next_offset = stored
    room = limit - sum(piece.size for piece in pieces)
    shown = held_shown(attempt.output_held)
    if finished and shown and next_offset >= stored and room > 0:
        # the line the task was writing when the attempt ended without a result (lost,
        # resolved): its redacted form kept on the attempt row (never the sealed line),
        # shown after the stored pieces
        held = Stored(attempt.id, stored, ChunkKind.TEXT, shown)
        page, after = _page([held], max(offset, stored), room)
        pieces += page
        stored += held.size
        next_offset = max(next_offset, after)
    return OutputPage(
        attempt=attempt,
        pieces=tuple(pieces),
        next_offset=max(next_offset, offset),
        stored_bytes=stored,
        attempt_finished=finished,
        run_finished=loaded.run.status.terminal,
        expired=expired,
    )


def _page(rows: Sequence[Stored], offset: int, limit: int) -> tuple[list[Stored], int]:
    """The pieces from byte ``offset`` on, at most ``limit`` bytes (at least one piece's
    worth, cut on a character boundary), and where the next page starts."""
    pieces: list[Stored] = []
    size = 0
    next_offset = offset
    for row in rows:
        raw = row.text.encode()
        start = max(offset, row.offset)
        raw = raw[start - row.offset :]
        while raw and raw[0] & 0xC0 == 0x80:  # asked from inside a character: its next one
            raw, start = raw[1:], start + 1
        whole = len(raw)
        room = limit - size
        if room <= 0:
            break
        if len(raw) > room:
            raw = raw[:room]
        text = raw.decode("utf-8", "ignore")
        used = len(text.encode())
        if used == 0 and raw:
            break  # not even one whole character fits
        pieces.append(Stored(row.attempt_id, start, row.kind, text))
        size += used
        next_offset = start + used
        if used < whole:
            break  # the page ends inside this piece
    return pieces, next_offset
