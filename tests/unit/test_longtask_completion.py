"""Task-level completion (seed C "任务级完成判定" and the completion scenarios of "Testing
Decisions"): one receipt cannot satisfy unrelated criteria, no judge gives unproven, a task
whose required criteria are all subjective never completes by itself, a person's criterion
survives later plan versions, and only fully evidenced required criteria give completed."""

from __future__ import annotations

from typing import Final

from hypothesis import given, settings
from hypothesis import strategies as st

from longtasks.domain.completion import (
    Criterion,
    EvidenceRef,
    Outcome,
    Source,
    Verdict,
    criterion_result,
    evaluate,
    kept_after_interruption,
    revise_criteria,
)
from longtasks.domain.states import CriterionResult as CR
from longtasks.domain.states import PlanAuthor

REPORT: Final = Criterion("report", "the weekly report file exists", checker="file_exists")
SENT: Final = Criterion("sent", "the report was posted to the channel", checker="receipt")
TONE: Final = Criterion("tone", "the report reads well", checker=None)
SUMMARY: Final = Criterion("summary", "the summary is accurate", checker=None)


def _pass(criterion: Criterion, source: Source = Source.CHECKER, *, bound_to: str = "") -> Verdict:
    ref = EvidenceRef(f"ev-{criterion.id}", bound_to or criterion.id)
    return Verdict(criterion.id, source, CR.PASSED, (ref,))


def _outcome(criteria: list[Criterion], verdicts: list[Verdict]) -> tuple[Outcome, tuple[str, ...]]:
    completion = evaluate(criteria, verdicts)
    return completion.outcome, completion.unmet


def test_one_receipt_cannot_satisfy_unrelated_criteria() -> None:
    receipt = EvidenceRef("receipt-42", "sent")  # produced for "sent"
    verdicts = [
        Verdict("sent", Source.CHECKER, CR.PASSED, (receipt,)),
        Verdict("report", Source.CHECKER, CR.PASSED, (receipt,)),  # the same receipt again
    ]
    completion = evaluate([REPORT, SENT], verdicts)
    assert completion.results == {"report": CR.UNPROVEN, "sent": CR.PASSED}
    assert (completion.outcome, completion.unmet) == (Outcome.UNPROVEN, ("report",))


def test_no_judge_gives_unproven() -> None:
    criteria = [REPORT, TONE]
    completion = evaluate(criteria, [_pass(REPORT)])  # nobody judged the tone
    assert completion.results["tone"] is CR.UNPROVEN
    assert (completion.outcome, completion.unmet) == (Outcome.UNPROVEN, ("tone",))
    judged = evaluate(criteria, [_pass(REPORT), _pass(TONE, Source.JUDGE)])
    assert judged.outcome is Outcome.COMPLETED  # with a checker beside it, a judge counts


def test_a_task_whose_required_criteria_are_all_subjective_never_completes_by_itself() -> None:
    criteria = [TONE, SUMMARY, Criterion("opt", "nice to have", "x", required=False)]
    judged = [_pass(TONE, Source.JUDGE), _pass(SUMMARY, Source.JUDGE)]
    completion = evaluate(criteria, judged)
    assert (completion.outcome, completion.unmet) == (Outcome.UNPROVEN, ("tone", "summary"))
    assert "confirmation" in completion.why
    half = [_pass(TONE, Source.USER), _pass(SUMMARY, Source.JUDGE)]
    assert _outcome(criteria, half) == (Outcome.UNPROVEN, ("summary",))
    confirmed = [_pass(TONE, Source.USER), _pass(SUMMARY, Source.USER)]
    assert _outcome(criteria, confirmed) == (Outcome.COMPLETED, ())  # a person confirmed each


def test_only_fully_evidenced_required_criteria_give_completed() -> None:
    criteria = [REPORT, SENT, TONE]
    full = [_pass(REPORT), _pass(SENT), _pass(TONE, Source.JUDGE)]
    assert _outcome(criteria, full) == (Outcome.COMPLETED, ())
    no_evidence = Verdict("sent", Source.CHECKER, CR.PASSED, ())
    assert _outcome(criteria, [_pass(REPORT), no_evidence, _pass(TONE, Source.JUDGE)]) == (
        Outcome.UNPROVEN,
        ("sent",),
    )
    failed = Verdict("report", Source.CHECKER, CR.FAILED, ())
    completion = evaluate(criteria, [failed, _pass(TONE, Source.JUDGE)])
    assert (completion.outcome, completion.unmet) == (Outcome.PARTIAL, ("report", "sent"))


def test_a_user_edited_criterion_survives_later_plan_versions() -> None:
    v2 = revise_criteria(
        [REPORT, SENT],
        [REPORT, Criterion("sent", "posted to #growth, not #general", "receipt")],
        PlanAuthor.USER,
        version=2,
    )
    edited = v2.criteria[1]
    assert (edited.author, edited.plan_version, edited.text) == (
        PlanAuthor.USER,
        2,
        "posted to #growth, not #general",
    )
    assert v2.criteria[0] == REPORT  # unchanged: keeps its author and version
    # the model's v3 loosens the person's criterion and leaves it out of a later list
    loosened = Criterion("sent", "posted anywhere", "receipt", required=False)
    v3 = revise_criteria(v2.criteria, [REPORT, loosened, TONE], PlanAuthor.MODEL, version=3)
    assert v3.criteria[1] == edited and v3.kept == ("sent",)
    assert v3.criteria[2].author is PlanAuthor.MODEL and v3.criteria[2].plan_version == 3
    v4 = revise_criteria(v3.criteria, [REPORT], PlanAuthor.MODEL, version=4)
    assert [c.id for c in v4.criteria] == ["report", "sent"] and v4.kept == ("sent",)
    assert v4.criteria[1] == edited
    # a person may waive their own criterion: a new version making it optional
    v5 = revise_criteria(v4.criteria, [REPORT, loosened], PlanAuthor.USER, version=5)
    assert v5.criteria[1].required is False and v5.kept == ()


def test_whose_verdict_counts() -> None:
    # a deterministic criterion counts only its checker; a subjective one a person over a judge
    assert criterion_result(REPORT, [_pass(REPORT, Source.JUDGE)]) is CR.UNPROVEN
    assert criterion_result(REPORT, [_pass(REPORT, Source.USER)]) is CR.UNPROVEN
    assert criterion_result(TONE, [_pass(TONE, Source.CHECKER)]) is CR.UNPROVEN
    rejected = Verdict("tone", Source.USER, CR.FAILED)
    assert criterion_result(TONE, [_pass(TONE, Source.JUDGE), rejected]) is CR.FAILED
    assert criterion_result(TONE, [rejected, _pass(TONE, Source.USER)]) is CR.PASSED  # latest


def test_optional_criteria_never_block_and_no_required_criterion_proves_nothing() -> None:
    optional = Criterion("nice", "a chart", "file_exists", required=False)
    assert _outcome([REPORT, optional], [_pass(REPORT)]) == (Outcome.COMPLETED, ())
    assert evaluate([optional], [_pass(optional)]).outcome is Outcome.UNPROVEN
    assert evaluate([], []).outcome is Outcome.UNPROVEN


def test_after_an_interrupted_verification_only_conclusive_checks_and_answers_are_kept() -> None:
    kept = _pass(REPORT)
    failed = Verdict("sent", Source.CHECKER, CR.FAILED)
    inconclusive = Verdict("sent", Source.CHECKER, CR.UNPROVEN)
    judged = _pass(TONE, Source.JUDGE)
    answered = _pass(SUMMARY, Source.USER)
    verdicts = [kept, failed, inconclusive, judged, answered]
    assert kept_after_interruption(verdicts) == (kept, failed, answered)


ids = st.sampled_from(["a", "b", "c", "d"])
criteria = st.lists(
    st.builds(
        Criterion,
        id=ids,
        text=st.just("t"),
        checker=st.sampled_from([None, "file_exists"]),
        required=st.booleans(),
    ),
    max_size=4,
    unique_by=lambda c: c.id,
)
verdicts = st.lists(
    st.builds(
        Verdict,
        criterion_id=ids,
        source=st.sampled_from(list(Source)),
        result=st.sampled_from(list(CR)),
        evidence=st.lists(st.builds(EvidenceRef, id=st.just("ev"), criterion_id=ids)).map(tuple),
    ),
    max_size=8,
)


def _proven(criterion: Criterion, given: list[Verdict], all_subjective: bool) -> bool:
    """Independently: the latest verdict of the most authoritative source that counts passed
    with evidence bound to this criterion (only a person counts when all are subjective)."""
    if all_subjective:
        sources = [Source.USER]
    elif criterion.subjective:
        sources = [Source.USER, Source.JUDGE]
    else:
        sources = [Source.CHECKER]
    for source in sources:
        mine = [v for v in given if v.criterion_id == criterion.id and v.source is source]
        if mine:
            bound = any(ref.criterion_id == criterion.id for ref in mine[-1].evidence)
            return mine[-1].result is CR.PASSED and bound
    return False


@settings(max_examples=250, deadline=None, database=None)
@given(criteria, verdicts)
def test_completed_exactly_when_every_required_criterion_is_proven(
    live: list[Criterion], given: list[Verdict]
) -> None:
    completion = evaluate(live, given)
    required = [c for c in live if c.required]
    all_subjective = all(c.subjective for c in required)
    proven = bool(required) and all(_proven(c, given, all_subjective) for c in required)
    assert (completion.outcome is Outcome.COMPLETED) == proven
    assert (completion.outcome is Outcome.COMPLETED) == (completion.unmet == () and proven)
    assert set(completion.unmet) <= {c.id for c in required}
    if any(completion.results[c.id] is CR.FAILED for c in required):
        assert completion.outcome is Outcome.PARTIAL
