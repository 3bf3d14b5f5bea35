"""The judge interface for subjective criteria (seed C "任务级完成判定": a model's opinion on
what no deterministic checker can prove). truerun ships no judge: with none configured a
subjective criterion stays ``unproven`` and the task asks a person (a ``verification``
decision) instead of completing. A deployment plugs one in by passing a ``Judge`` to the
attempt service; its verdicts are stored with source ``judge`` and their evidence bound to
their criterion, and ``completion.evaluate`` still never completes a task whose required
criteria are all subjective on a judge's word alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from longtasks.domain.model import CriterionRecord, Evidence
from longtasks.domain.states import CriterionResult


@dataclass(frozen=True, slots=True)
class Opinion:
    """A judge's verdict on one criterion and why, in words (stored as its evidence)."""

    result: CriterionResult
    reasoning: str
    reference: str  # where the judge's full answer is kept (model, request id)


class Judge(Protocol):
    async def judge(
        self, goal: str, criterion: CriterionRecord, evidence: Sequence[Evidence]
    ) -> Opinion | None:
        """An opinion on ``criterion`` from the task's stored evidence; None: no opinion
        (the criterion stays unproven)."""
        ...


def subjective(criteria: Sequence[CriterionRecord]) -> list[CriterionRecord]:
    """The criteria only a judge or a person can decide."""
    return [c for c in criteria if c.criterion.subjective]
