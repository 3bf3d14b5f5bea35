"""An attempt's output: its own append-only, offset-addressed store, never the event log
(seed B §21 item 13). Pure: what to store and what to note, decided from the attempt row.

A runtime sends its output in OUTPUT events of bounded chunks. Each chunk is appended to the
attempt's stored output, redacted; the event log gets only a note when the output starts and
then at most one per ``note_interval_ms`` ("output progressed to N"), and one when the cap
is reached. So 10 MB of output costs the event table the same few rows as 10 KB.

Redaction across chunk boundaries, as a streaming transducer: a secret may arrive cut
anywhere over several chunks, and neither part alone looks like one. So only whole lines are
redacted and stored; the text after the last newline (the line still being written) is held
and joined, in clear, with the next chunk: the stored text is the same however the output was
cut. Nothing un-redacted is written anywhere: a held line that holds or may begin a secret
(``redaction_open.open_at``: ``Authorization: Bear``, ``"password": "w1``, ``AKIAIOSF``)
is kept on the attempt row only sealed (coordinator/domain/held_seal.py: readable by this
process alone) beside its redacted fallback, which is what a restarted or another
coordinator joins instead, dropping the rest of that line (``Hold.DROP_LINE``). A private
key block is swallowed until its END line (``in_private_key``). The held line is stored when
the attempt ends; a line longer than ``max_held_chars`` is cut (never inside a possible
secret: that part is stored redacted and the rest of its line dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from coordinator.domain import held_seal
from coordinator.domain.model import Attempt
from coordinator.domain.redaction import REDACTED, redact
from coordinator.domain.redaction_open import open_at
from kernel.records import replace


class ChunkKind(StrEnum):
    TEXT = "text"
    SKIPPED = "skipped"
    TRUNCATED = "truncated"


class Hold(StrEnum):
    """What the next chunk's first characters may still belong to."""

    NOTHING = ""
    #: rows written before the transducer: a redaction ran to the end of what arrived
    CONTINUES = "continues"
    IN_PRIVATE_KEY = "in_private_key"  # a private key block began and has not ended
    SEALED = "sealed"  # held = redacted fallback + MARK + the clear line sealed
    DROP_LINE = "drop_line"  # held is final (redacted); the rest of its line is dropped


@dataclass(frozen=True, slots=True)
class OutputPolicy:
    max_bytes: int = 16 * 1024 * 1024  # stored per attempt, then a truncated marker
    note_interval_ms: int = 60_000  # at most one progress note per attempt this often
    max_held_chars: int = 2048  # a line longer than this is stored without waiting for its end
    #: what held lines are sealed with on the attempt row (held_seal: this process's key)
    seal_key: bytes = field(default=held_seal.PROCESS_KEY, repr=False)


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
    held: str = ""  # the line still being written, as stored: clear only if harmless
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
        flushed, state = _flush(state, policy)
        pieces += _piece(attempt_id, state, ChunkKind.TEXT, flushed, pieces)
        marker = f"\n[{skipped} bytes of output skipped by the runtime; its log file has them]\n"
        pieces += _piece(attempt_id, state, ChunkKind.SKIPPED, marker, pieces)
        log_end = log_start + skipped
    else:
        ready, state = _feed(state, text, policy, final=False)
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
    flushed, state = _flush(state, policy)
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


def _feed(
    state: OutputState, text: str, policy: OutputPolicy, *, final: bool
) -> tuple[str, OutputState]:
    """What can be stored now (redacted), and the new held line."""
    text = text.replace(held_seal.MARK, "\ufffd")  # clear output never holds a seal's mark
    if state.hold is Hold.IN_PRIVATE_KEY:
        text = state.held + text  # held: the start of an END line, no key material
        end = _PRIVATE_KEY_END.search(text)
        if end is None:  # still inside the key block: nothing of it is kept
            return "", replace(state, held=_end_line_start(text))
        text = text[end.end() :]
        state = replace(state, held="", hold=Hold.NOTHING)
    line, text, dropping = _resume(state, text, policy.seal_key)
    if dropping and not final:  # the line's end has not come yet: still dropped
        return "", replace(state, held=line, hold=Hold.DROP_LINE)
    joined = line + text
    if not final and (begin := _open_private_key(joined)) >= 0:
        # a key block began and has not ended: what comes before it is stored, the block
        # itself is swallowed up to its END line, whichever chunk brings it
        rest = joined[begin:]
        return redact(joined[:begin]) + REDACTED, replace(
            state, held=_end_line_start(rest), hold=Hold.IN_PRIVATE_KEY
        )
    if final:
        return redact(joined), replace(state, held="", hold=Hold.NOTHING)
    cut = joined.rfind("\n") + 1
    ends = [m.end() for m in _PRIVATE_KEY_END.finditer(joined, cut)]
    if ends and _PRIVATE_KEY_BEGIN.search(joined, 0, ends[-1]):
        cut = ends[-1]  # a key block ends in the held line: stored with its block, whole
    if len(joined) - cut > policy.max_held_chars:
        return _long_line(state, joined, cut, policy)
    held, hold = _hold(joined[cut:], policy.seal_key)
    return redact(joined[:cut]), replace(state, held=held, hold=hold)


def _resume(state: OutputState, text: str, key: bytes) -> tuple[str, str, bool]:
    """The held line to join with ``text`` (clear when this process sealed it), ``text``
    less what is dropped, and whether the line is still being dropped."""
    if state.hold is Hold.CONTINUES:  # a row from before: its held line is redacted
        return state.held, text[_TOKEN_CONTINUATION.match(text).end() :], False  # type: ignore[union-attr]
    if state.hold is Hold.SEALED:
        fallback, _, sealed = state.held.partition(held_seal.MARK)
        clear = held_seal.unseal(key, sealed)
        if clear is not None:
            return clear, text, False
        return _dropped(fallback, text)
    if state.hold is Hold.DROP_LINE:
        return _dropped(state.held, text)
    return state.held, text, False


def _dropped(fallback: str, text: str) -> tuple[str, str, bool]:
    """The rest of a line whose start could not be read back: dropped, to its newline."""
    newline = text.find("\n")
    if newline < 0:
        return fallback, "", True
    return fallback, text[newline:], False


def _hold(line: str, key: bytes) -> tuple[str, Hold]:
    """``line`` as the attempt row keeps it: in clear when it neither holds nor may begin a
    secret, else its redacted fallback and the line sealed."""
    if not line:
        return "", Hold.NOTHING
    at = open_at(line)
    cleaned = redact(line)
    if at is None and cleaned == line:
        return line, Hold.NOTHING
    fallback = cleaned if at is None else redact(line[:at]) + REDACTED
    return fallback + held_seal.MARK + held_seal.seal(key, line), Hold.SEALED


def _long_line(
    state: OutputState, joined: str, start: int, policy: OutputPolicy
) -> tuple[str, OutputState]:
    """A line longer than the hold: stored up to ``max_held_chars`` from its end; when a
    secret may be open at that cut, it is stored redacted and the rest of the line dropped."""
    cut = len(joined) - policy.max_held_chars
    at = open_at(joined[start:cut])
    if at is not None:
        return redact(joined[: start + at]) + REDACTED, replace(state, held="", hold=Hold.DROP_LINE)
    held, hold = _hold(joined[cut:], policy.seal_key)
    return redact(joined[:cut]), replace(state, held=held, hold=hold)


def _flush(state: OutputState, policy: OutputPolicy) -> tuple[str, OutputState]:
    return _feed(state, "", policy, final=True)


def held_shown(held: str | None) -> str:
    """A stored held line as a reader may show it: the redacted fallback, never the seal."""
    return (held or "").partition(held_seal.MARK)[0]


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
