"""The evidence reader (docs/long-tasks.md "Reading evidence"; seed C "执行上下文与 attempt"):
a shared, read-only, on-demand reader through which an attempt dereferences the evidence
references of ITS OWN task, and nothing else:

- only ``long_task_evidence`` rows bound to the attempt's task (another task's, owner's or
  project's id answers ``LONG_TASK_NOT_FOUND`` exactly as a missing one); never events,
  decisions' internals or any other record;
- at most ``PER_READ`` bytes a read and ``PER_ATTEMPT`` bytes over the attempt's life (the
  counter is the attempt row's ``evidence_bytes_read``), a cut read says so;
- the content is always marked untrusted (data to judge, never an instruction);
- a target that is gone answers its stored summary with ``GONE`` and a reason: a read never
  fails, and nothing of the step changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.errors import InvalidArgument, LongTaskLeaseNotHeld, LongTaskNotFound
from longtasks.domain.model import Attempt, Evidence
from longtasks.service.evidence_sources import EvidenceSources
from longtasks.service.upkeep import Upkeep
from longtasks.store.upkeep_sql import UpkeepSql

PER_READ = 64 * 1024
PER_ATTEMPT = 1024 * 1024
BY_READ = "per_read"
BY_ATTEMPT = "per_attempt"


@dataclass(frozen=True, slots=True)
class EvidenceRead:
    evidence: Evidence
    content: bytes
    truncated: bool
    truncated_by: str  # BY_READ, BY_ATTEMPT or ""
    total_bytes: int
    next_offset: int
    unavailable_reason: str
    attempt_bytes_left: int
    untrusted: bool = True


class EvidenceReader:
    def __init__(
        self,
        upkeep: Upkeep,
        sql: UpkeepSql,
        sources: EvidenceSources,
        per_read: int = PER_READ,
        per_attempt: int = PER_ATTEMPT,
    ) -> None:
        self._upkeep = upkeep
        self._sql = sql
        self._sources = sources
        self._per_read = per_read
        self._per_attempt = per_attempt

    async def read(
        self, attempt: Attempt, evidence_id: str, offset: int, max_bytes: int
    ) -> EvidenceRead:
        if offset < 0:
            raise InvalidArgument("offset must be 0 or more", field="offset")
        if max_bytes < 0:
            raise InvalidArgument("max_bytes must be 0 or more", field="max_bytes")
        evidence = await self._sql.one_evidence(attempt.task_id, evidence_id)
        if evidence is None:  # missing, or another task's: the same answer
            raise LongTaskNotFound(
                f"no evidence {evidence_id!r} in this attempt's task", evidence_id=evidence_id
            )
        if attempt.ended_at_ms is not None:
            raise LongTaskLeaseNotHeld(
                f"attempt {attempt.id} has ended: it reads nothing more", attempt_id=attempt.id
            )
        wanted = min(max_bytes or self._per_read, self._per_read)
        cut_by_read = max_bytes == 0 or max_bytes > self._per_read
        left = max(
            0, self._per_attempt - await self._upkeep.bytes_read(attempt.task_id, attempt.id)
        )
        allowed = min(wanted, left)
        source = await self._sources.window(evidence, offset, allowed)
        content = source.content
        if content:
            granted = await self._upkeep.charge_read(
                attempt.task_id, attempt.id, len(content), self._per_attempt
            )
            if granted < len(content):  # a concurrent read took the rest of the budget
                content, allowed = content[:granted], granted
            left = max(0, left - granted)
        end = offset + len(content)
        truncated = not source.unavailable and end < source.total_bytes
        by = ""
        if truncated and allowed < wanted:
            by = BY_ATTEMPT
        elif truncated and cut_by_read:
            by = BY_READ
        return EvidenceRead(
            evidence=evidence,
            content=content,
            truncated=truncated,
            truncated_by=by,
            total_bytes=source.total_bytes,
            next_offset=end if content else max(offset, source.next_offset),
            unavailable_reason=source.unavailable,
            attempt_bytes_left=left,
        )
