"""What an evidence reference's content is, as far as the server can read it (docs/long-tasks.md
"Reading evidence"). A reference is a pointer into a store truerun may or may not hold:

- ``receipt``: the side effect's stored receipt (its intent's row), rendered as text;
- ``answer``: the stored decision and a person's answer, rendered as text;
- ``run_output``: a run's stored output (the output store, ``ReadRunOutput``'s read), only of
  a run that is an attempt of the same task;
- ``file`` and ``url``: on the runtime's machine or outside: the server cannot read them;
- anything else: nothing the server can read.

A target that is gone (the output expired, the row trimmed or never there) reads as
``GONE``; the stored summary always renders. Reads only: nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.service.output_reads import read_output
from coordinator.store.base import RunReader
from kernel.errors import DomainError
from longtasks.domain.model import Attempt, Decision, Effect, Evidence
from longtasks.store.upkeep_sql import UpkeepSql

#: The marker every gone target carries (the seed's words).
GONE = "evidence unavailable (expired/cleaned)"
#: Not gone, just not the server's to read.
NOT_READABLE = "not readable by the server"


@dataclass(frozen=True, slots=True)
class Source:
    """A window of a reference's content: ``content`` from ``offset``, the whole size when
    known, where to read on, or why there is none."""

    content: bytes = b""
    total_bytes: int = 0
    next_offset: int = 0
    unavailable: str = ""


def _unavailable(why: str) -> Source:
    return Source(unavailable=why)


def _window(text: str, offset: int, limit: int) -> Source:
    raw = text.encode()
    piece = raw[offset : offset + limit]
    return Source(piece, len(raw), min(offset + len(piece), len(raw)) if piece else offset)


def _receipt_text(effect: Effect) -> str:
    receipt = effect.receipt
    assert receipt is not None
    return (
        f"receipt of side effect {effect.id} (step {effect.step_id}, try {effect.try_no})\n"
        f"intent target: {effect.target}\nintent: {effect.summary}\n"
        f"receipt target: {receipt.target}\nexternal id: {receipt.external_id or ''}\n"
        f"at (ms): {receipt.at_ms}\nsummary: {receipt.summary}\ndetail: {receipt.detail}\n"
    )


def _answer_text(decision: Decision) -> str:
    return (
        f"decision {decision.id} ({decision.kind}, {decision.state})\n"
        f"question: {decision.question}\nanswer: {decision.answer or ''}\n"
        f"answered by: {decision.answered_by or ''}\nnote: {decision.note}\n"
    )


def _run_ids(reference: str) -> tuple[str, str]:
    """``run:<run>``, ``<run>`` or ``<run>/<run attempt>``."""
    value = reference.removeprefix("run:")
    run_id, _, attempt_id = value.partition("/")
    return run_id.strip(), attempt_id.strip()


class EvidenceSources:
    """The content behind a reference of one task, read from the long-task store and the
    run store (its output)."""

    def __init__(self, sql: UpkeepSql, runs: RunReader) -> None:
        self._sql = sql
        self._runs = runs

    async def window(self, evidence: Evidence, offset: int, limit: int) -> Source:
        """Up to ``limit`` bytes of the content from ``offset`` (0 bytes: only whether it
        is there and how big)."""
        if evidence.unavailable_reason:
            return _unavailable(evidence.unavailable_reason)
        kind = evidence.kind
        if kind == "receipt":
            return await self._receipt(evidence, offset, limit)
        if kind == "answer":
            return await self._answer(evidence, offset, limit)
        if kind == "run_output":
            return await self._run_output(evidence, offset, limit)
        if kind == "file":
            return _unavailable(
                f"{NOT_READABLE}: a file on the runtime's machine (read it there; truerun "
                "keeps its summary and render: size, hash)"
            )
        if kind == "url":
            return _unavailable(f"{NOT_READABLE}: a URL (truerun does not fetch it)")
        return _unavailable(f"{NOT_READABLE}: kind {kind!r} points outside truerun")

    async def gone(self, evidence: Evidence) -> str | None:
        """Why the reference's target is gone, or None (there, or not checkable)."""
        source = await self.window(evidence, 0, 0)
        return source.unavailable if source.unavailable.startswith(GONE) else None

    async def _receipt(self, evidence: Evidence, offset: int, limit: int) -> Source:
        for effect in await self._sql.effects(None, evidence.task_id):
            receipt = effect.receipt
            if receipt is None:
                continue
            cited = evidence.effect_id == effect.id or (
                not evidence.effect_id
                and evidence.reference in {receipt.external_id, receipt.target, effect.id}
            )
            if cited:
                return _window(_receipt_text(effect), offset, limit)
        return _unavailable(f"{GONE}: no stored receipt of this task matches the reference")

    async def _answer(self, evidence: Evidence, offset: int, limit: int) -> Source:
        decision_id = evidence.reference.removeprefix("decision:")
        for decision in await self._sql.decisions(None, evidence.task_id):
            if decision.id == decision_id:
                return _window(_answer_text(decision), offset, limit)
        return _unavailable(f"{GONE}: no stored decision of this task is {decision_id!r}")

    async def _run_output(self, evidence: Evidence, offset: int, limit: int) -> Source:
        run_id, run_attempt_id = _run_ids(evidence.reference)
        attempts: list[Attempt] = await self._sql.attempts(None, evidence.task_id)
        if run_id not in {a.run_id for a in attempts}:
            # only this task's own runs: a reference naming another run reads nothing
            return _unavailable(f"{NOT_READABLE}: the run is not an attempt of this task")
        try:
            page = await read_output(self._runs, run_id, run_attempt_id, offset, max(limit, 1))
        except DomainError:
            return _unavailable(f"{GONE}: the run or its attempt is no longer stored")
        if page.expired:
            return _unavailable(f"{GONE}: the run's stored output was deleted by retention")
        content = "".join(piece.text for piece in page.pieces).encode()[:limit]
        return Source(content, page.stored_bytes, offset + len(content))
