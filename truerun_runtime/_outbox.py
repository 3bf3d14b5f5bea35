"""The durable outbox: every runtime event is on disk before it is sent.

One append-only JSON-lines journal per attempt, ``<directory>/<attempt>.jsonl``:

- ``{"attempt": "<attempt id>"}`` opens the file;
- ``{"seq": n, "event": {...}, "meta": {...}}`` is one event (the proto as JSON) plus private
  bookkeeping of the writer (e.g. how far a log file was read), stored atomically with it;
- ``{"ack": n}`` records that the server committed every event up to ``n``;
- ``{"base": {...}}`` (only after a compaction) summarises the lines that were dropped.

Seqs start at 1 and grow by one per attempt. An acknowledged event is never sent again; every
unacknowledged one is re-sent, in seq order, after a reconnect. A torn last line (the writer
was killed mid-write) is cut off when the journal is loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from truerun.v1 import runtime_service_pb2 as pb

log = logging.getLogger(__name__)

COMPACT_AFTER_ACKED_LINES = 512
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,96}$")

Listener = Callable[[pb.RuntimeEvent], None]


@dataclass
class AttemptJournal:
    """What the outbox knows about one attempt (the journal, replayed)."""

    attempt_id: str
    path: Path
    last_seq: int = 0
    acked_seq: int = 0
    type_counts: dict[int, int] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    pending: list[pb.RuntimeEvent] = field(default_factory=list)
    lines_acked: int = 0


class Outbox:
    """Per-attempt event journals in ``directory``; the single source of events to send."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self._dir = directory
        self._fsync = fsync
        self._journals: dict[str, AttemptJournal] = {}
        self._listeners: list[Listener] = []
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path in sorted(directory.glob("*.jsonl")):
            journal = _load(path)
            if journal is not None:
                self._journals[journal.attempt_id] = journal

    @property
    def directory(self) -> Path:
        return self._dir

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with every event right after it is on disk."""
        self._listeners.append(listener)

    def attempts(self) -> list[str]:
        return list(self._journals)

    def last_seq(self, attempt_id: str) -> int:
        """The highest seq written for the attempt; 0 when none."""
        journal = self._journals.get(attempt_id)
        return journal.last_seq if journal else 0

    def acked_seq(self, attempt_id: str) -> int:
        journal = self._journals.get(attempt_id)
        return journal.acked_seq if journal else 0

    def count(self, attempt_id: str, event_type: int) -> int:
        """How many events of ``event_type`` were written for the attempt."""
        journal = self._journals.get(attempt_id)
        return journal.type_counts.get(event_type, 0) if journal else 0

    def meta(self, attempt_id: str) -> dict[str, Any]:
        """The writer's bookkeeping: every ``meta`` given to ``append``, merged in seq order."""
        journal = self._journals.get(attempt_id)
        return dict(journal.meta) if journal else {}

    def unacked(self, attempt_id: str | None = None) -> list[pb.RuntimeEvent]:
        """Events not yet acknowledged, in seq order per attempt (attempts in first-write order)."""
        if attempt_id is not None:
            journal = self._journals.get(attempt_id)
            return list(journal.pending) if journal else []
        return [event for journal in self._journals.values() for event in journal.pending]

    def append(
        self, event: pb.RuntimeEvent, meta: Mapping[str, Any] | None = None
    ) -> pb.RuntimeEvent:
        """Give ``event`` the attempt's next seq, write it (with ``meta``) and return it.

        The event reaches the listeners (the sender) only after the line is written.
        """
        attempt_id = event.attempt_id
        if not attempt_id:
            raise ValueError("an event needs an attempt_id")
        journal = self._journals.get(attempt_id)
        if journal is None:
            journal = AttemptJournal(attempt_id, self._dir / _file_name(attempt_id))
            self._write(journal.path, [{"attempt": attempt_id}], truncate=True)
            self._journals[attempt_id] = journal
        event.seq = journal.last_seq + 1
        extra = dict(meta or {})
        self._write(journal.path, [{"seq": event.seq, "event": _to_json(event), "meta": extra}])
        _apply_event(journal, event, extra)
        for listener in self._listeners:
            listener(event)
        return event

    def ack(self, attempt_id: str, seq: int) -> bool:
        """Forget every event of the attempt up to ``seq``; False when it acknowledges nothing new.

        An ack for an unknown attempt or beyond the last written seq is ignored (the seqs that
        exist are acknowledged).
        """
        journal = self._journals.get(attempt_id)
        if journal is None:
            return False
        seq = min(seq, journal.last_seq)
        if seq <= journal.acked_seq:
            return False
        self._write(journal.path, [{"ack": seq}])
        _apply_ack(journal, seq)
        if journal.lines_acked >= COMPACT_AFTER_ACKED_LINES:
            self._compact(journal)
        return True

    def forget(self, attempt_id: str) -> None:
        """Delete the attempt's journal (retention); its events can no longer be re-sent."""
        journal = self._journals.pop(attempt_id, None)
        if journal is not None:
            journal.path.unlink(missing_ok=True)

    def _compact(self, journal: AttemptJournal) -> None:
        """Rewrite the journal as a summary plus the unacknowledged events (write + rename)."""
        base = {
            "last_seq": journal.last_seq,
            "acked_seq": journal.acked_seq,
            "types": {str(k): v for k, v in journal.type_counts.items()},
            "meta": journal.meta,
        }
        lines: list[dict[str, Any]] = [{"attempt": journal.attempt_id}, {"base": base}]
        lines += [{"seq": e.seq, "event": _to_json(e), "meta": {}} for e in journal.pending]
        tmp = journal.path.with_suffix(".tmp")
        self._write(tmp, lines, truncate=True)
        os.replace(tmp, journal.path)
        journal.lines_acked = 0

    def _write(self, path: Path, lines: list[dict[str, Any]], *, truncate: bool = False) -> None:
        data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if truncate else os.O_APPEND)
        fd = os.open(path, flags, 0o600)
        try:
            os.write(fd, data.encode())
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def _file_name(attempt_id: str) -> str:
    if _SAFE_NAME.match(attempt_id) and not attempt_id.startswith("."):
        return f"{attempt_id}.jsonl"
    return f"h-{hashlib.sha256(attempt_id.encode()).hexdigest()[:32]}.jsonl"


def _to_json(event: pb.RuntimeEvent) -> dict[str, Any]:
    return json_format.MessageToDict(event, preserving_proto_field_name=True)


def _apply_event(journal: AttemptJournal, event: pb.RuntimeEvent, meta: Mapping[str, Any]) -> None:
    journal.last_seq = event.seq
    journal.type_counts[event.type] = journal.type_counts.get(event.type, 0) + 1
    journal.meta.update(meta)
    if event.seq > journal.acked_seq:
        journal.pending.append(event)


def _apply_ack(journal: AttemptJournal, seq: int) -> None:
    dropped = sum(1 for e in journal.pending if e.seq <= seq)
    journal.pending = [e for e in journal.pending if e.seq > seq]
    journal.acked_seq = seq
    journal.lines_acked += dropped + 1


class OutboxCorrupt(Exception):
    """A journal line other than the last one cannot be read: refuse to guess."""


def _load(path: Path) -> AttemptJournal | None:
    """Replay one journal; a torn last line (the writer was killed mid-write) is cut off."""
    raw = path.read_bytes()
    journal: AttemptJournal | None = None
    chunks = raw.splitlines(keepends=True)
    good_end = 0
    for index, chunk in enumerate(chunks):
        try:
            if not chunk.endswith(b"\n"):
                raise ValueError("torn line")
            journal = _replay_line(journal, path, json.loads(chunk))
        except (ValueError, KeyError, TypeError, json_format.ParseError) as error:
            if index < len(chunks) - 1:
                raise OutboxCorrupt(f"{path}: line {index + 1}: {error}") from error
            log.warning("outbox %s: cut a torn last line of %d bytes", path, len(chunk))
            with path.open("r+b") as handle:
                handle.truncate(good_end)
            break
        good_end += len(chunk)
    return journal


def _replay_line(
    journal: AttemptJournal | None, path: Path, line: dict[str, Any]
) -> AttemptJournal | None:
    if "attempt" in line:
        return AttemptJournal(str(line["attempt"]), path)
    if journal is None:
        raise ValueError("journal without an attempt line")
    if "base" in line:
        base = line["base"]
        journal.last_seq = int(base["last_seq"])
        journal.acked_seq = int(base["acked_seq"])
        journal.type_counts = {int(k): int(v) for k, v in base["types"].items()}
        journal.meta = dict(base["meta"])
        journal.pending = []
    elif "seq" in line:
        event = json_format.ParseDict(line["event"], pb.RuntimeEvent())
        if event.seq <= journal.last_seq:  # an unacknowledged event kept by a compaction
            if event.seq > journal.acked_seq:
                journal.pending.append(event)
            return journal
        if event.seq != journal.last_seq + 1:
            raise ValueError(f"gap in journal: {event.seq} after {journal.last_seq}")
        _apply_event(journal, event, line.get("meta") or {})
    elif "ack" in line:
        seq = int(line["ack"])
        if seq > journal.acked_seq:
            _apply_ack(journal, seq)
    return journal
