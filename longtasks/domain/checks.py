"""The verifier's server-side checkers and the split of criteria between checkers (docs/
long-tasks.md "Verifier"), pure.

A criterion names the checker that proves it (``checker_kind``) or none (subjective):

- **runtime checkers** run read-only on the runtime, in the verifying attempt, and come back
  as that attempt's verdicts (``truerun_runtime.longtask.checkers``): ``file_exists``,
  ``file_sha256``, ``command``, ``http_status`` (allow-listed URLs), ``sql``;
- **server checkers** run here, over stored state only: ``receipt_present`` (a step's effect
  has its receipt) and ``step_completed`` (a step completed with evidence bound to it);
- **subjective** criteria go to a judge; with none configured they stay ``unproven``, and a
  task whose required criteria are all subjective never completes without a person.

An attempt may send verdicts for runtime kinds only: a verdict claiming a server kind, a
judge or a person is refused (``attempt_verdict_refusal``), so no runtime can vouch for
what only the record or a person may say. A server verdict carries new evidence bound to
its own criterion (the receipt's reference), so one receipt satisfies only the criterion
that asked about it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from longtasks.domain.completion import Source
from longtasks.domain.model import CriterionRecord, Effect, Evidence, PlanStep
from longtasks.domain.states import CriterionResult, StepState

RUNTIME_KINDS = frozenset({"file_exists", "file_sha256", "command", "http_status", "sql"})
SERVER_KINDS = frozenset({"receipt_present", "step_completed"})
KINDS = RUNTIME_KINDS | SERVER_KINDS


@dataclass(frozen=True, slots=True)
class ServerEvidence:
    """Evidence a server checker produced, to be stored bound to its criterion."""

    kind: str
    reference: str
    summary: str
    effect_id: str | None = None


@dataclass(frozen=True, slots=True)
class ServerVerdict:
    criterion_id: str
    result: CriterionResult
    why: str
    evidence: tuple[ServerEvidence, ...] = ()

    @property
    def source(self) -> str:
        return Source.CHECKER.value


def checker_kind_refusal(kind: str | None) -> str | None:
    """Why a criterion may not bind this checker (None: it may)."""
    if kind is None or kind in KINDS:
        return None
    return f"unknown checker {kind!r}: one of {', '.join(sorted(KINDS))}, or none (subjective)"


def attempt_verdict_refusal(criterion: CriterionRecord | None, source: str) -> str | None:
    """Why an attempt may not give this verdict (None: it may). An attempt speaks only for
    the runtime checker its criterion binds: ``checker:<kind>`` with that very kind."""
    if criterion is None:
        return "no such criterion in the task's current plan version"
    kind = criterion.criterion.checker
    if kind is None:
        return "a subjective criterion is decided by a judge or a person, never an attempt"
    if kind not in RUNTIME_KINDS:
        return f"checker {kind} runs on the server, over the stored record"
    if source != f"checker:{kind}":
        return f"the criterion binds checker {kind}: a verdict from {source!r} does not count"
    return None


def _step_id(params: Mapping[str, object] | None) -> str | None:
    step_id = params.get("step_id") if params else None
    return step_id if isinstance(step_id, str) and step_id else None


def server_verdicts(
    criteria: Sequence[CriterionRecord],
    params: Mapping[str, Mapping[str, object] | None],
    steps: Sequence[PlanStep],
    effects: Sequence[Effect],
    evidence: Sequence[Evidence],
) -> list[ServerVerdict]:
    """A verdict for every criterion binding a server checker, from the stored record.
    ``params``: each criterion's checker parameters by criterion id, as the caller read
    them from the display payload (``display_json``; a damaged one is None, and its
    checker then names no step: unproven, never passed)."""
    by_step = {s.step_id: s for s in steps}
    out: list[ServerVerdict] = []
    for record in criteria:
        kind = record.criterion.checker
        if kind not in SERVER_KINDS:
            continue
        cid = record.criterion.id
        step_id = _step_id(params.get(cid))
        step = by_step.get(step_id or "")
        if step is None:
            why = f"checker {kind} names no step of the current plan (step_id {step_id!r})"
            out.append(ServerVerdict(cid, CriterionResult.UNPROVEN, why))
        elif kind == "receipt_present":
            out.append(_receipt_present(cid, step, effects))
        else:
            out.append(_step_completed(cid, step, evidence, effects))
    return out


def _receipt_present(cid: str, step: PlanStep, effects: Sequence[Effect]) -> ServerVerdict:
    mine = [e for e in effects if e.step_id == step.step_id and e.receipt is not None]
    if not mine:
        why = f"step {step.step_id} has no effect with a receipt"
        return ServerVerdict(cid, CriterionResult.FAILED, why)
    last = mine[-1]
    receipt = last.receipt
    assert receipt is not None
    summary = f"receipt of step {step.step_id}: {receipt.target}: {receipt.summary}"[:1024]
    proof = ServerEvidence("receipt", receipt.external_id or last.id, summary, last.id)
    return ServerVerdict(cid, CriterionResult.PASSED, summary, (proof,))


def _step_completed(
    cid: str, step: PlanStep, evidence: Sequence[Evidence], effects: Sequence[Effect]
) -> ServerVerdict:
    """Completed, with its proof: evidence bound to the step or, for a step completed on
    its receipt (recovery completes a step whose effect came back before its attempt died,
    without the attempt's evidence), that receipt."""
    if step.state is not StepState.COMPLETED:
        why = f"step {step.step_id} is {step.state}, not completed"
        return ServerVerdict(cid, CriterionResult.FAILED, why)
    bound = [e for e in evidence if e.step_id == step.step_id]
    if bound:
        summary = f"step {step.step_id} completed: {bound[-1].summary}"[:1024]
        proof = ServerEvidence("step", f"step:{step.step_id}:{bound[-1].id}", summary)
        return ServerVerdict(cid, CriterionResult.PASSED, summary, (proof,))
    receipted = [e for e in effects if e.id == step.receipt_id and e.receipt is not None]
    if receipted:
        effect = receipted[0]
        receipt = effect.receipt
        assert receipt is not None
        summary = f"step {step.step_id} completed on its receipt: {receipt.summary}"[:1024]
        proof = ServerEvidence("receipt", receipt.external_id or effect.id, summary, effect.id)
        return ServerVerdict(cid, CriterionResult.PASSED, summary, (proof,))
    why = f"step {step.step_id} is completed without evidence or a receipt bound to it"
    return ServerVerdict(cid, CriterionResult.UNPROVEN, why)
