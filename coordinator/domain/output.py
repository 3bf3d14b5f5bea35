"""An attempt's output: its own append-only, offset-addressed store, never the event log
(seed B §21 item 13). Pure: what to store and what to note, decided from the attempt row.

A runtime sends its output in OUTPUT events of bounded chunks. Each chunk is appended to the
attempt's stored output, redacted; the event log gets only a note when the output starts and
then at most one per ``note_interval_ms`` ("output progressed to N"), and one when the cap
is reached. So 10 MB of output costs the event table the same few rows as 10 KB.

Redaction across chunk boundaries: a secret may arrive split over two chunks, and neither
half alone looks like a secret. So the text after the last newline of what arrived (the line
still being written) is held back on the attempt row, redacted as far as it goes, and joined
with the next chunk before that line is stored. What is held is redacted, never raw: a
secret complete in the held line is already "[redacted]", and when a redaction reached the
very end of what arrived, the token characters the next chunk continues it with are dropped
with it (``continues``). A private key block is swallowed until its END line
(``in_private_key``). The held line is stored when the attempt ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from coordinator.domain.model import Attempt
from coordinator.domain.redaction import REDACTED, redact
from kernel.records import replace


class ChunkKind(StrEnum):
    TEXT = "text"
    SKIPPED = "skipped"
    TRUNCATED = "truncated"


class Hold(StrEnum):
    """What the next chunk's first characters may still belong to."""

    NOTHING = ""
    CONTINUES = "continues"  # a redaction ran to the end of what arrived
    IN_PRIVATE_KEY = "in_private_key"  # a private key block began and has not ended


@dataclass(frozen=True, slots=True)
class OutputPolicy:
    max_bytes: int = 16 * 1024 * 1024  # stored per attempt, then a truncated marker
    note_interval_ms: int = 60_000  # at most one progress note per attempt this often
    max_held_chars: int = 2048  # a line longer than this is stored without waiting for its end


DEFAULT_OUTPUT_POLICY = OutputPolicy()


@dataclass(frozen=True, slots=True)
class Stored:
    """A piece of stored output: ``offset`` in the attempt's stored text (UTF-8 bytes)."""

    attempt_id: str
    offset: int
    kind: ChunkKind
    text: str

    @property
    def size(self) -> int:
        return len(self.text.encode())


@dataclass(frozen=True, slots=True)
class OutputState:
    """The output columns of an attempt row."""

    stored_bytes: int = 0  # how much is stored (the next piece's offset)
    log_bytes: int = 0  # how far into the runtime's log output has arrived
    held: str = ""  # the redacted line still being written
    hold: Hold = Hold.NOTHING
    truncated: bool = False
    noted_at_ms: int | None = None  # the last progress note


@dataclass(frozen=True, slots=True)
class Taken:
    state: OutputState
    pieces: tuple[Stored, ...]
    #: the note for the event log (``offset`` = log bytes received), or None
    note: dict[str, int] | None
    truncated_now: bool


_PRIVATE_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_PRIVATE_KEY_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----")
_TOKEN_CONTINUATION = re.compile(r"[A-Za-z0-9_\-+/=.~]*")


def take(
    attempt_id: str,
    state: OutputState,
    chunk: dict[str, object],
    policy: OutputPolicy,
    now_ms: int,
) -> Taken:
    """One OUTPUT event's chunk (``data`` at log ``offset``, or ``skipped_bytes``)."""
    data = chunk.get("data", chunk.get("text", ""))
    text = data if isinstance(data, str) else ""
    skipped = _count(chunk.get("skipped_bytes"))
    offset = _count(chunk.get("offset"))
    log_start = state.log_bytes if offset is None else offset
    pieces: list[Stored] = []
    if skipped:
        flushed, state = _flush(state)
        pieces += _piece(attempt_id, state, ChunkKind.TEXT, flushed, pieces)
        marker = f"\n[{skipped} bytes of output skipped by the runtime; its log file has them]\n"
        pieces += _piece(attempt_id, state, ChunkKind.SKIPPED, marker, pieces)
        log_end = log_start + skipped
    else:
        ready, state = _feed(state, text, policy.max_held_chars, final=False)
        pieces += _piece(attempt_id, state, ChunkKind.TEXT, ready, pieces)
        log_end = log_start + len(text.encode())
    state = _stored(state, pieces)
    state, pieces, truncated_now = _cap(attempt_id, state, pieces, policy)
    state = replace(state, log_bytes=max(state.log_bytes, log_end))
    note: dict[str, int] | None = None
    if state.noted_at_ms is None or now_ms - state.noted_at_ms >= policy.note_interval_ms:
        note = {"offset": state.stored_bytes, "log_bytes": state.log_bytes}
        state = replace(state, noted_at_ms=now_ms)
    return Taken(state, tuple(pieces), note, truncated_now)


def _count(value: object) -> int | None:
    """A byte count from a payload (JSON numbers arrive as floats), None if it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value < 0 or value != int(value):
        return None
    return int(value)


def finish(attempt_id: str, state: OutputState, policy: OutputPolicy) -> Taken:
    """The attempt ended: the held line is stored (no more output can complete it)."""
    flushed, state = _flush(state)
    pieces = _piece(attempt_id, state, ChunkKind.TEXT, flushed, [])
    state = _stored(state, pieces)
    state, pieces, truncated_now = _cap(attempt_id, state, pieces, policy)
    return Taken(state, tuple(pieces), None, truncated_now)


def state_of(attempt: Attempt) -> OutputState:
    return OutputState(
        stored_bytes=attempt.output_stored_bytes,
        log_bytes=attempt.output_log_bytes,
        held=attempt.output_held or "",
        hold=Hold(attempt.output_hold or ""),
        truncated=attempt.output_truncated,
        noted_at_ms=attempt.output_noted_at_ms,
    )


def columns(state: OutputState) -> dict[str, object]:
    """The attempt fields that hold ``state``."""
    return {
        "output_stored_bytes": state.stored_bytes,
        "output_log_bytes": state.log_bytes,
        "output_held": state.held or None,
        "output_hold": state.hold.value or None,
        "output_truncated": state.truncated,
        "output_noted_at_ms": state.noted_at_ms,
    }


# -- the held line ----------------------------------------------------------------------------


def _feed(state: OutputState, text: str, max_held: int, *, final: bool) -> tuple[str, OutputState]:
    """What can be stored now (redacted), and the new held line."""
    if state.hold is Hold.IN_PRIVATE_KEY:
        text = state.held + text  # held: the start of an END line, no key material
        end = _PRIVATE_KEY_END.search(text)
        if end is None:  # still inside the key block: nothing of it is kept
            return "", replace(state, held=_end_line_start(text))
        text = text[end.end() :]
        state = replace(state, held="", hold=Hold.NOTHING)
    elif state.hold is Hold.CONTINUES:
        text = text[_TOKEN_CONTINUATION.match(text).end() :]  # type: ignore[union-attr]
    joined = state.held + text
    if not final and (begin := _open_private_key(joined)) >= 0:
        # a key block began and has not ended: what comes before it is stored, the block
        # itself is swallowed up to its END line, whichever chunk brings it
        rest = joined[begin:]
        return redact(joined[:begin]) + REDACTED, replace(
            state, held=_end_line_start(rest), hold=Hold.IN_PRIVATE_KEY
        )
    cleaned = redact(joined)
    if final:
        return cleaned, replace(state, held="", hold=Hold.NOTHING)
    cut = cleaned.rfind("\n") + 1
    if len(cleaned) - cut > max_held:
        cut = len(cleaned) - max_held
    held = cleaned[cut:]
    hold = Hold.CONTINUES if cleaned.endswith(REDACTED) else Hold.NOTHING
    return cleaned[:cut], replace(state, held=held, hold=hold)


def _flush(state: OutputState) -> tuple[str, OutputState]:
    return _feed(state, "", 0, final=True)


def _end_line_start(text: str) -> str:
    """The end of ``text`` if it may be the beginning of a key block's END line (which the
    next chunk completes): the dashes and words of the armour, never key material."""
    at = text.rfind("-----END")
    if at >= 0 and len(text) - at <= 64:
        return text[at:]
    for size in range(min(len(text), 8), 0, -1):
        if "-----END".startswith(text[-size:]):
            return text[-size:]
    return ""


def _open_private_key(text: str) -> int:
    """Where a key block that has not ended begins in ``text``; -1 if none."""
    begins = list(_PRIVATE_KEY_BEGIN.finditer(text))
    if begins and _PRIVATE_KEY_END.search(text, begins[-1].end()) is None:
        return begins[-1].start()
    return -1


# -- pieces and the cap -----------------------------------------------------------------------


def _piece(
    attempt_id: str, state: OutputState, kind: ChunkKind, text: str, before: list[Stored]
) -> list[Stored]:
    if not text:
        return []
    offset = state.stored_bytes + sum(piece.size for piece in before)
    return [Stored(attempt_id, offset, kind, text)]


def _stored(state: OutputState, pieces: list[Stored]) -> OutputState:
    if not pieces:
        return state
    last = pieces[-1]
    return replace(state, stored_bytes=last.offset + last.size)


def _cap(
    attempt_id: str, state: OutputState, pieces: list[Stored], policy: OutputPolicy
) -> tuple[OutputState, list[Stored], bool]:
    """Nothing past ``policy.max_bytes`` is stored; the first piece over it is cut on a
    character boundary and followed by one truncated marker."""
    if state.truncated:
        first = pieces[0].offset if pieces else state.stored_bytes
        return replace(state, stored_bytes=first, held="", hold=Hold.NOTHING), [], False
    if state.stored_bytes <= policy.max_bytes:
        return state, pieces, False
    kept: list[Stored] = []
    for piece in pieces:
        room = policy.max_bytes - piece.offset
        if room <= 0:
            break
        if piece.size > room:
            head = piece.text.encode()[:room].decode("utf-8", "ignore")
            piece = Stored(attempt_id, piece.offset, piece.kind, head)
        kept.append(piece)
    end = kept[-1].offset + kept[-1].size if kept else pieces[0].offset
    marker = (
        f"\n[output truncated: this attempt's stored output reached its cap of "
        f"{policy.max_bytes} bytes; the runtime's log file has the rest]\n"
    )
    kept.append(Stored(attempt_id, end, ChunkKind.TRUNCATED, marker))
    state = replace(state, truncated=True, held="", hold=Hold.NOTHING)
    return _stored(state, kept), kept, True
