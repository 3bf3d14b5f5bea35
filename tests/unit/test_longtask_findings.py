"""The release metrics' findings (``longtasks/domain/findings.py``): which receipt
duplicates an effect, and which verifier result disputes a completion."""

from __future__ import annotations

from dataclasses import replace

from longtasks.domain.completion import Criterion
from longtasks.domain.findings import disputed_completion, duplicate_of, intent_key
from longtasks.domain.model import CriterionRecord, Effect, PlanVersion, Receipt
from longtasks.domain.states import CriterionResult, PlanAuthor, TaskState


def effect(id: str, key: str | None, receipt: str | None | bool = False, **kw: object) -> Effect:
    values: dict[str, object] = {
        "id": id,
        "task_id": "lt-1",
        "step_id": "s1",
        "plan_version": 1,
        "attempt_id": "a-1",
        "try_no": 1,
        "target": "mail:team",
        "summary": "the report",
        "idempotency_key": key,
        "recorded_at_ms": 1,
    }
    values.update(kw)
    made = Effect(**values)  # type: ignore[arg-type]
    if receipt is False:
        return made
    ext = receipt if isinstance(receipt, str) else None
    return replace(made, receipt=Receipt(ext, "mail:team", 1, "250 OK"))


def test_the_intent_key_is_the_idempotency_key_else_the_step_of_its_plan_version() -> None:
    assert intent_key(effect("e1", "k")) == intent_key(effect("e2", "k", step_id="s9"))
    assert intent_key(effect("e1", None)) != intent_key(effect("e2", None, plan_version=2))
    assert intent_key(effect("e1", None)) != intent_key(effect("e2", None, step_id="s2"))


def test_a_second_receipt_is_a_duplicate_unless_it_names_the_same_external_id() -> None:
    first = effect("e1", "k", "ext-1")
    second = effect("e2", "k", try_no=2)
    assert duplicate_of([first, second], second, "ext-1") is None  # the service deduplicated
    assert duplicate_of([first, second], second, "ext-2") == first
    assert duplicate_of([first, second], second, None) == first
    keyless = effect("e1", None, None)
    assert duplicate_of([keyless, second], second, None) is None  # another intent
    no_receipt = effect("e1", "k")
    assert duplicate_of([no_receipt, second], second, "ext-2") is None  # never happened
    assert duplicate_of([second], second, "ext-2") is None  # itself


def record(result: CriterionResult, at: int | None) -> CriterionRecord:
    return CriterionRecord(
        Criterion("c1", "it is there", "file_exists"), 1, "{}", result, "checker", at
    )


def plan(version: int, closed: TaskState | None, at: int | None) -> PlanVersion:
    return PlanVersion("lt-1", version, PlanAuthor.USER, "", "ana", 0, closed, at)


def test_a_completion_is_disputed_only_by_failing_the_pass_it_stood_on() -> None:
    completed = [plan(1, TaskState.COMPLETED, 100), plan(2, None, None)]
    passed = record(CriterionResult.PASSED, 90)
    assert disputed_completion(passed, CriterionResult.FAILED, completed) == completed[0]
    assert disputed_completion(passed, CriterionResult.UNPROVEN, completed) == completed[0]
    assert disputed_completion(passed, CriterionResult.PASSED, completed) is None
    failed = record(CriterionResult.FAILED, 90)
    assert disputed_completion(failed, CriterionResult.FAILED, completed) is None
    later = record(CriterionResult.PASSED, 150)  # passed after the completion: not its basis
    assert disputed_completion(later, CriterionResult.FAILED, completed) is None
    partial = [plan(1, TaskState.PARTIAL, 100), plan(2, None, None)]
    assert disputed_completion(passed, CriterionResult.FAILED, partial) is None
    assert disputed_completion(passed, CriterionResult.FAILED, [plan(1, None, None)]) is None
