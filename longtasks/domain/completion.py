"""Task-level completion (seed C "任务级完成判定"), pure: the model never marks a task
completed; it declares "ready for verification" and this decides from the criteria and the
verdicts given for them.

- A criterion binds a deterministic checker, or has none and is subjective. A checker's
  verdict counts for a deterministic criterion; a judge's or a person's for a subjective one.
  With no counted verdict a criterion is ``unproven``: no judge never means passed.
- ``passed`` counts only with evidence bound to that criterion's id: one receipt produced
  for one criterion satisfies no other.
- ``completed`` only when every required criterion passed; a failed required criterion
  gives ``partial`` (with the unmet list); otherwise ``unproven``. A task whose required
  criteria are all subjective (or that has none) never completes on a judge's word: only a
  person's confirmation of each completes it.
- A model's plan revision never overwrites or drops a criterion a person wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from longtasks.domain.states import CriterionResult, PlanAuthor


@dataclass(frozen=True, slots=True)
class Criterion:
    id: str
    text: str
    checker: str | None  # the deterministic checker it binds; None: subjective
    required: bool = True  # a person waives one by a new plan version making it optional
    author: PlanAuthor = PlanAuthor.MODEL
    plan_version: int = 1  # the version that wrote it

    @property
    def subjective(self) -> bool:
        return self.checker is None


class Source(StrEnum):
    CHECKER = "checker"  # a deterministic, read-only check
    JUDGE = "judge"  # a judge model's opinion
    USER = "user"  # a person's confirmation, through an answered decision


@dataclass(frozen=True, slots=True)
class EvidenceRef:
    id: str
    criterion_id: str  # the criterion it was produced for; it proves nothing else


@dataclass(frozen=True, slots=True)
class Verdict:
    criterion_id: str
    source: Source
    result: CriterionResult
    evidence: tuple[EvidenceRef, ...] = ()


#: Whose verdicts count for a criterion, the most authoritative first.
COUNTED_SOURCES: Mapping[bool, tuple[Source, ...]] = {
    False: (Source.CHECKER,),  # deterministic: only its checker
    True: (Source.USER, Source.JUDGE),  # subjective: a person over a judge
}


class Outcome(StrEnum):
    COMPLETED = "completed"  # -> verification_passed
    PARTIAL = "partial"  # -> start_correction while corrections remain, else incomplete
    UNPROVEN = "unproven"  # -> request_decision: a person confirms or waives; never completed


@dataclass(frozen=True, slots=True)
class Completion:
    outcome: Outcome
    results: Mapping[str, CriterionResult]  # every criterion's result, by id
    unmet: tuple[str, ...]  # the required criteria that stand in the way, in order
    why: str


def criterion_result(criterion: Criterion, verdicts: Iterable[Verdict]) -> CriterionResult:
    """The result of one criterion: the counted verdict, passed only with bound evidence."""
    counted = _counted(criterion, verdicts)
    if counted is None:
        return CriterionResult.UNPROVEN
    if counted.result is CriterionResult.PASSED and not _bound(counted, criterion):
        return CriterionResult.UNPROVEN
    return counted.result


def _counted(criterion: Criterion, verdicts: Iterable[Verdict]) -> Verdict | None:
    mine = [v for v in verdicts if v.criterion_id == criterion.id]
    for source in COUNTED_SOURCES[criterion.subjective]:
        found = [v for v in mine if v.source is source]
        if found:
            return found[-1]  # the latest of the most authoritative source
    return None


def _bound(verdict: Verdict, criterion: Criterion) -> bool:
    return any(ref.criterion_id == criterion.id for ref in verdict.evidence)


def evaluate(criteria: Sequence[Criterion], verdicts: Sequence[Verdict]) -> Completion:
    """The task's completion from its live criteria and the verdicts given for them."""
    results = {c.id: criterion_result(c, verdicts) for c in criteria}
    required = [c for c in criteria if c.required]
    failed = tuple(c.id for c in required if results[c.id] is CriterionResult.FAILED)
    if failed:
        unmet = tuple(c.id for c in required if results[c.id] is not CriterionResult.PASSED)
        return Completion(Outcome.PARTIAL, results, unmet, f"required criteria failed: {failed}")
    if all(c.subjective for c in required):
        if not required:
            return Completion(
                Outcome.UNPROVEN, results, (), "no required criterion: nothing to prove"
            )
        unconfirmed = tuple(c.id for c in required if not _confirmed(c, verdicts, results))
        if unconfirmed:
            why = "every required criterion is subjective: only a person's confirmation counts"
            return Completion(Outcome.UNPROVEN, results, unconfirmed, why)
    unproven = tuple(c.id for c in required if results[c.id] is CriterionResult.UNPROVEN)
    if unproven:
        return Completion(Outcome.UNPROVEN, results, unproven, f"not proven: {unproven}")
    return Completion(Outcome.COMPLETED, results, (), "every required criterion has evidence")


def _confirmed(
    criterion: Criterion, verdicts: Iterable[Verdict], results: Mapping[str, CriterionResult]
) -> bool:
    counted = _counted(criterion, verdicts)
    return (
        counted is not None
        and counted.source is Source.USER
        and results[criterion.id] is CriterionResult.PASSED
    )


def kept_after_interruption(verdicts: Iterable[Verdict]) -> tuple[Verdict, ...]:
    """Verdicts that survive an interrupted verification: a deterministic checker's
    conclusion (passed or failed) and a person's answer; a judge's is always recomputed, and
    an inconclusive check is run again."""
    return tuple(
        v
        for v in verdicts
        if v.source is Source.USER
        or (v.source is Source.CHECKER and v.result is not CriterionResult.UNPROVEN)
    )


@dataclass(frozen=True, slots=True)
class Revision:
    criteria: tuple[Criterion, ...]
    kept: tuple[str, ...]  # a person's criteria the revision tried to change or drop


def revise_criteria(
    current: Sequence[Criterion],
    proposed: Sequence[Criterion],
    author: PlanAuthor,
    version: int,
) -> Revision:
    """The criteria of plan version ``version`` written by ``author``. A new or changed
    criterion is stamped with the author and the version; a criterion a person wrote
    survives a model's revision unchanged, even when the model left it out."""
    before = {c.id: c for c in current}
    protected = {
        c.id for c in current if c.author is PlanAuthor.USER and author is PlanAuthor.MODEL
    }
    merged: list[Criterion] = []
    kept: list[str] = []
    for new in proposed:
        old = before.get(new.id)
        if new.id in protected:
            assert old is not None
            merged.append(old)
            if _terms(new) != _terms(old):
                kept.append(new.id)
        elif old is not None and _terms(new) == _terms(old):
            merged.append(old)
        else:
            merged.append(replace(new, author=author, plan_version=version))
    listed = {c.id for c in proposed}
    for cid in (c.id for c in current if c.id in protected and c.id not in listed):
        merged.append(before[cid])
        kept.append(cid)
    return Revision(tuple(merged), tuple(kept))


def _terms(criterion: Criterion) -> tuple[str, str | None, bool]:
    return (criterion.text, criterion.checker, criterion.required)
