"""The Start journal: every Start that reached a runtime instance id, on disk before it is acted on.

It lets a runtime answer ``INSPECT_STATE_NEVER_RECEIVED`` ("provably never started") instead
of ``NOT_FOUND`` for an attempt it has no task of. That answer makes truerun put the same
attempt back in the queue, so it must never be given for a Start the runtime may have acted
on. The promise a journal keeps:

- every Start is recorded (append, flush, fsync) before anything answers, refuses or starts
  it, refused and duplicate Starts included (they were received);
- records are never removed: the journal outlives a task's pruning;
- it covers the **whole life** of the instance id it names, or it proves nothing.

One append-only JSON-lines file:

- ``{"start_journal": 1, "instance_id": "<id>", "inode": n}`` opens it (``create``, at the
  birth of the instance id, before the id is stored or used); ``inode`` is the file's own inode,
  so a copied or file-level restored journal (which may miss later Starts) proves nothing;
- ``{"start": "<attempt id>"}`` is one received Start;
- ``{"torn": "<prefix>"}`` stands for a record that was torn by a crash: every attempt id
  that starts with the prefix counts as received (conservative: the agent never claims
  "never received" for a Start it may have seen; ``""`` covers every attempt);
- ``{"void": "<why>"}`` ends the proof for good: the runtime found it holds an attempt the
  journal has no record of (``void_unless_received``), so the journal missed Starts.

A journal proves nothing (``proof`` is False; ``never_received`` is always False, ``record``
writes nothing) when it is missing, its header names another instance id or another inode, a
line other than the last cannot be read, a line is ``void``, or the caller says the id may
have lived without it (``may_prove=False``: a configured id can outlive a wiped state dir;
an id generated before journals existed has no record of its earlier Starts). A torn last
line is rewritten as a ``torn`` record (write + rename) when the journal is loaded.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

VERSION = 1
_RECORD_OPENING = b'{"start":"'
_MAX_ESCAPE = 6  # the longest JSON escape, \uXXXX, cut anywhere


class StartJournal:
    """The Starts received by one runtime instance id; see the module docstring."""

    def __init__(
        self,
        path: Path,
        instance_id: str,
        *,
        proof: bool,
        received: set[str] | None = None,
        torn: list[str] | None = None,
        fsync: bool = True,
    ) -> None:
        self.path = path
        self.instance_id = instance_id
        self.proof = proof
        self._received = received if received is not None else set()
        self._torn = torn if torn is not None else []
        self._fsync = fsync

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def create(cls, path: Path, instance_id: str, *, fsync: bool = True) -> StartJournal:
        """A new, empty journal for an instance id being born (nothing was received under it
        yet): durable (temp file, fsync, rename, directory fsync) before the id is stored, so
        a stored generated id always has its journal. Replaces any older journal (of an id
        that was never stored)."""
        journal = cls(path, instance_id, proof=True, fsync=fsync)
        journal._rewrite()
        return journal

    @classmethod
    def load(
        cls, path: Path, instance_id: str, *, may_prove: bool, fsync: bool = True
    ) -> StartJournal:
        """The journal at ``path`` for ``instance_id``; proof only where the rules hold."""
        none = cls(path, instance_id, proof=False, fsync=fsync)
        if not may_prove:
            return none
        try:
            raw = path.read_bytes()
            inode = path.stat().st_ino
        except FileNotFoundError:
            log.info("no start journal at %s: Inspect never answers NEVER_RECEIVED", path)
            return none
        chunks = raw.splitlines(keepends=True)
        received: set[str] = set()
        torn: list[str] = []
        try:
            header = json.loads(chunks[0]) if chunks and chunks[0].endswith(b"\n") else None
            if not _header_matches(header, instance_id, inode):
                log.warning("start journal %s is not %s's: it proves nothing", path, instance_id)
                return none
            for chunk in chunks[1:-1]:
                _replay(json.loads(chunk), received, torn)
        except (ValueError, TypeError, KeyError) as error:
            log.error("start journal %s cannot be read (%s): it proves nothing", path, error)
            return none
        journal = cls(path, instance_id, proof=True, received=received, torn=torn, fsync=fsync)
        try:
            last_read = len(chunks) < 2 or _replays(chunks[-1], received, torn)
        except _Void as error:
            log.error("start journal %s is void (%s): it proves nothing", path, error)
            return none
        if not last_read:
            # the writer died mid-line (or the line is damaged): keep what it may have named
            prefix = _torn_prefix(chunks[-1])
            log.warning("start journal %s: a torn record (%r) counts as received", path, prefix)
            torn.append(prefix)
            journal._rewrite()
        elif len(chunks) > 1 and not chunks[-1].endswith(b"\n"):
            journal._rewrite()  # a whole record without its newline: the next append needs it
        return journal

    # -- using -----------------------------------------------------------------------------

    def record(self, attempt_id: str) -> None:
        """Write that the Start of ``attempt_id`` was received (before it is acted on).

        In memory first: should the write fail, this process still counts it as received.
        """
        if not self.proof or not attempt_id or attempt_id in self._received:
            return
        self._received.add(attempt_id)
        self._append({"start": attempt_id})

    def void_unless_received(self, attempt_ids: Iterable[str]) -> None:
        """Stop proving anything, for good, if one of ``attempt_ids`` (attempts the runtime
        holds, e.g. in its outbox) has no record: the journal missed Starts (a runtime without
        it ran on this state dir, or a record was lost), so its silence proves nothing."""
        if not self.proof:
            return
        missing = sorted(a for a in attempt_ids if not self.received(a))
        if missing:
            log.error(
                "start journal %s misses held attempts %s: it proves nothing",
                self.path,
                missing[:5],
            )
            self._append({"void": f"missed {len(missing)} held attempts, e.g. {missing[0]}"})
            self.proof = False

    def received(self, attempt_id: str) -> bool:
        """True when a Start of ``attempt_id`` reached this instance id (or may have)."""
        return attempt_id in self._received or any(attempt_id.startswith(p) for p in self._torn)

    def never_received(self, attempt_id: str) -> bool:
        """True only when the journal proves no Start of ``attempt_id`` ever reached the id."""
        return self.proof and not self.received(attempt_id)

    # -- files -----------------------------------------------------------------------------

    def _rewrite(self) -> None:
        """The whole journal, atomically (temp file, fsync, rename, directory fsync)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            inode = os.fstat(fd).st_ino  # a rename keeps it: the header names the final file
            header = {"start_journal": VERSION, "instance_id": self.instance_id, "inode": inode}
            lines: list[dict[str, Any]] = [header]
            lines += [{"start": a} for a in sorted(self._received)]
            lines += [{"torn": p} for p in self._torn]
            os.write(fd, _encode(lines))
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        if self._fsync:
            _fsync_dir(self.path.parent)

    def _append(self, line: dict[str, Any]) -> None:
        # no O_CREAT: a journal deleted under a running agent fails the Start (nothing acts
        # on it) rather than starting a new file that would miss every earlier record
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            os.write(fd, _encode([line]))
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def _encode(lines: list[dict[str, Any]]) -> bytes:
    # ensure_ascii: a record's bytes are printable ASCII, which _torn_prefix relies on
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _header_matches(header: Any, instance_id: str, inode: int) -> bool:
    return (
        isinstance(header, dict)
        and header.get("start_journal") == VERSION
        and header.get("instance_id") == instance_id
        and header.get("inode") == inode
    )


def _replay(line: Any, received: set[str], torn: list[str]) -> None:
    if not isinstance(line, dict):
        raise ValueError("not a journal line")
    if isinstance(line.get("start"), str):
        received.add(line["start"])
    elif isinstance(line.get("torn"), str):
        torn.append(line["torn"])
    elif "void" in line:
        raise _Void(str(line["void"]))
    else:  # unknown (a newer writer?): guessing could claim "never received" wrongly
        raise ValueError(f"unknown journal line {sorted(line)}")


class _Void(ValueError):
    """A ``void`` line: the journal proves nothing, for good."""


def _replays(chunk: bytes, received: set[str], torn: list[str]) -> bool:
    """Replay the last line; False when it cannot be read (torn). A void line raises."""
    try:
        _replay(json.loads(chunk), received, torn)
    except _Void:
        raise
    except (ValueError, TypeError, KeyError):
        return False
    return True


def _torn_prefix(chunk: bytes) -> str:
    """What a torn record is sure to begin with: the attempt id's readable start, else ""."""
    if not chunk.startswith(_RECORD_OPENING):
        return ""  # cut inside the opening, or not a record at all: it could be any attempt
    fragment = chunk[len(_RECORD_OPENING) :]
    readable = len(fragment)
    for index, byte in enumerate(fragment):
        if not 0x20 <= byte < 0x7F:  # e.g. the zeros a crash can leave past the written end
            readable = index
            break
    fragment = fragment[:readable]
    for cut in range(min(len(fragment), _MAX_ESCAPE) + 1):
        try:
            value = json.loads(b'"' + fragment[: len(fragment) - cut] + b'"')
        except ValueError:
            continue
        if isinstance(value, str):
            # a lone high surrogate is half of a character the real id goes on with
            return value[:-1] if value and "\ud800" <= value[-1] <= "\udbff" else value
    return ""
