"""The verifier's split of criteria and its server checkers (longtasks/domain/checks.py):
an attempt speaks only for the runtime checker its criterion binds; the server checkers
read the stored record only, and their evidence is bound to their own criterion."""

from __future__ import annotations

from dataclasses import replace
from typing import Final

import pytest

from longtasks.domain.checks import (
    KINDS,
    RUNTIME_KINDS,
    SERVER_KINDS,
    attempt_verdict_refusal,
    checker_kind_refusal,
    server_verdicts,
)
from longtasks.domain.completion import Criterion
from longtasks.domain.model import CriterionRecord, Effect, Evidence, PlanStep, Receipt
from longtasks.domain.states import CriterionResult as CR
from longtasks.domain.states import SideEffect, StepState


def _record(cid: str, checker: str | None) -> CriterionRecord:
    return CriterionRecord(Criterion(cid, f"{cid} holds", checker), 1)


def _step(step_id: str, state: StepState) -> PlanStep:
    return PlanStep("t", 1, step_id, 1, step_id, SideEffect.NON_IDEMPOTENT, state, 3, 1)


def _effect(step_id: str, receipt: bool, eid: str = "e1") -> Effect:
    got = Receipt("ext-7", "chat:#team", 1_000, "posted the report") if receipt else None
    return Effect(eid, "t", step_id, 1, "a1", 1, "chat:#team", "post", None, 900, got)


SENT: Final = _record("sent", "receipt_present")
DONE: Final = _record("done", "step_completed")
FILE: Final = _record("file", "file_exists")
TONE: Final = _record("tone", None)


def test_the_kinds_split_into_runtime_and_server() -> None:
    assert RUNTIME_KINDS.isdisjoint(SERVER_KINDS)
    assert KINDS == RUNTIME_KINDS | SERVER_KINDS
    assert checker_kind_refusal(None) is None  # subjective
    assert all(checker_kind_refusal(k) is None for k in KINDS)
    assert "unknown checker 'magic'" in (checker_kind_refusal("magic") or "")


@pytest.mark.parametrize(
    ("record", "source", "refused"),
    [
        (FILE, "checker:file_exists", None),
        (FILE, "checker:command", "binds checker file_exists"),
        (FILE, "judge", "binds checker file_exists"),
        (FILE, "user", "binds checker file_exists"),
        (SENT, "checker:receipt_present", "runs on the server"),
        (DONE, "checker:step_completed", "runs on the server"),
        (TONE, "judge", "never an attempt"),
        (TONE, "checker:file_exists", "never an attempt"),
        (None, "checker:file_exists", "no such criterion"),
    ],
)
def test_an_attempt_speaks_only_for_its_criterions_runtime_checker(
    record: CriterionRecord | None, source: str, refused: str | None
) -> None:
    answer = attempt_verdict_refusal(record, source)
    assert (answer is None) if refused is None else (refused in (answer or ""))


def test_receipt_present_passes_with_the_receipt_as_evidence_for_that_criterion_only() -> None:
    steps = [_step("post", StepState.COMPLETED)]
    params = {"sent": {"step_id": "post"}, "done": {"step_id": "post"}}
    verdicts = server_verdicts([SENT, FILE, TONE], params, steps, [_effect("post", True)], [])
    assert [(v.criterion_id, v.result) for v in verdicts] == [("sent", CR.PASSED)]
    (proof,) = verdicts[0].evidence
    assert (proof.kind, proof.reference, proof.effect_id) == ("receipt", "ext-7", "e1")
    assert "posted the report" in proof.summary


def test_an_open_intent_is_no_receipt() -> None:
    steps = [_step("post", StepState.UNCERTAIN)]
    (verdict,) = server_verdicts(
        [SENT], {"sent": {"step_id": "post"}}, steps, [_effect("post", False)], []
    )
    assert verdict.result is CR.FAILED and not verdict.evidence
    assert "no effect with a receipt" in verdict.why


def test_another_steps_receipt_proves_nothing() -> None:
    steps = [_step("post", StepState.COMPLETED), _step("mail", StepState.COMPLETED)]
    effects = [_effect("mail", True)]
    (verdict,) = server_verdicts([SENT], {"sent": {"step_id": "post"}}, steps, effects, [])
    assert verdict.result is CR.FAILED


def test_step_completed_needs_the_state_and_evidence_bound_to_the_step() -> None:
    params = {"done": {"step_id": "build"}}
    bound = Evidence("ev1", "t", "file", "/out/report.md", "report, 2 KiB", step_id="build")
    elsewhere = Evidence("ev2", "t", "file", "/out/x", "x", step_id="other")
    cases = [
        (StepState.COMPLETED, [bound], CR.PASSED),
        (StepState.COMPLETED, [elsewhere], CR.UNPROVEN),
        (StepState.RUNNING, [bound], CR.FAILED),
        (StepState.SKIPPED, [bound], CR.FAILED),
    ]
    for state, evidence, expected in cases:
        (verdict,) = server_verdicts([DONE], params, [_step("build", state)], [], evidence)
        assert verdict.result is expected, (state, evidence)


def test_a_step_completed_on_its_receipt_is_proven_by_that_receipt() -> None:
    # recovery completes a step whose effect came back before its attempt died: no evidence
    # rows of the attempt's, the receipt is the proof
    done = replace(_step("post", StepState.COMPLETED), intent_id="e1", receipt_id="e1")
    other = _effect("post", True, eid="e0")  # an earlier try's receipt is not this try's
    params = {"done": {"step_id": "post"}}
    (verdict,) = server_verdicts([DONE], params, [done], [other, _effect("post", True)], [])
    assert verdict.result is CR.PASSED and verdict.evidence[0].effect_id == "e1"
    bare = replace(done, receipt_id=None)
    (verdict,) = server_verdicts([DONE], params, [bare], [_effect("post", True)], [])
    assert verdict.result is CR.UNPROVEN


@pytest.mark.parametrize("params", [None, {}, {"step_id": ""}, {"step_id": 7}, {"step_id": "gone"}])
def test_a_checker_naming_no_step_is_unproven_never_passed(
    params: dict[str, object] | None,
) -> None:
    steps = [_step("post", StepState.COMPLETED)]
    (verdict,) = server_verdicts([SENT], {"sent": params}, steps, [_effect("post", True)], [])
    assert verdict.result is CR.UNPROVEN and not verdict.evidence
