"""Bounded output streaming: the log file is complete; events carry bounded chunks of it.

Each OUTPUT event carries at most ``chunk_bytes`` of the log, cut on a UTF-8 character
boundary, with its byte offset. At most ``chunks_per_pump`` chunks go out per pump (the agent
pumps every tick), which bounds the event rate. When the unsent backlog grows past
``max_backlog`` the tailer skips ahead and says so (``skipped_bytes``): the log file still has
everything, referenced by path, size and sha256 in the terminal event.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Chunk:
    offset: int  # where the chunk starts in the log
    end: int  # where the next one starts
    data: str = ""
    skipped_bytes: int = 0

    def payload(self) -> dict[str, Any]:
        if self.skipped_bytes:
            return {"stream": "output", "offset": self.offset, "skipped_bytes": self.skipped_bytes}
        return {"stream": "output", "offset": self.offset, "data": self.data}


class OutputTailer:
    def __init__(
        self,
        path: Path,
        offset: int = 0,
        *,
        chunk_bytes: int = 4096,
        chunks_per_pump: int = 2,
        max_backlog: int = 64 * 1024,
    ) -> None:
        self.path = path
        self.offset = offset
        self._chunk = chunk_bytes
        self._per_pump = chunks_per_pump
        self._max_backlog = max(max_backlog, chunk_bytes)

    def pump(self, *, final: bool = False) -> list[Chunk]:
        """The next chunks; ``final`` (the command ended) drains up to the backlog bound."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        chunks: list[Chunk] = []
        if size - self.offset > self._max_backlog:
            skip = size - self.offset - self._chunk
            chunks.append(Chunk(self.offset, self.offset + skip, skipped_bytes=skip))
            self.offset += skip
        limit = None if final else self._per_pump
        with self.path.open("rb") as log:
            while self.offset < size and (limit is None or len(chunks) < limit):
                log.seek(self.offset)
                raw = log.read(min(self._chunk, size - self.offset))
                if not final or self.offset + len(raw) < size:
                    raw = _utf8_prefix(raw)
                if not raw:
                    break  # only part of a character so far
                chunks.append(
                    Chunk(self.offset, self.offset + len(raw), raw.decode("utf-8", "replace"))
                )
                self.offset += len(raw)
        return chunks


def _utf8_prefix(raw: bytes) -> bytes:
    """``raw`` without a trailing partial UTF-8 character."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte < 0x80:
            return raw  # ASCII: complete
        if byte >= 0xC0:  # a lead byte: is its character complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return raw if back >= need else raw[:-back]
    return raw  # not UTF-8 at all: send it as it is (decoded with replacement)


def file_digest(path: Path) -> dict[str, Any]:
    """``{log_path, log_size, log_sha256}`` of the complete log."""
    digest = hashlib.sha256()
    size = 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return {"log_path": str(path), "log_size": 0, "log_sha256": digest.hexdigest()}
    with os.fdopen(fd, "rb") as log:
        while block := log.read(1 << 20):
            digest.update(block)
            size += len(block)
    return {"log_path": str(path), "log_size": size, "log_sha256": digest.hexdigest()}
