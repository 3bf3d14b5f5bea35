"""The long-task storage invariants on SQLite and real PostgreSQL (seed C "Testing
Decisions", storage, plan revision and completion families): stale versions and stale
leases fail closed and change nothing; intent and receipt are atomic with the step change;
continue never reopens a terminal task and a cancelled one never restarts; completed steps
keep their evidence and a person's criterion survives the model's revisions; one receipt
proves no unrelated criterion; no state is read from JSON; two answers at once, one wins."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import (
    InvalidLongTaskTransition,
    LongTaskLeaseNotHeld,
    LongTaskVersionConflict,
)
from longtasks.domain.completion import Source
from longtasks.domain.model import StepDraft
from longtasks.domain.states import CriterionResult, PlanAuthor, SideEffect, StepState, TaskState
from longtasks.service.inputs import (
    Changed,
    Intent,
    NewCriterion,
    NewEvidence,
    ReceiptIn,
    VerdictIn,
)
from services.bootstrap import open_store
from tests.support.clock import Clock
from tests.support.longtasks import (
    ANA,
    SCHEDULER,
    Harness,
    execute,
    harness,
    new_task,
    running,
    snapshot,
    step_version,
)

T, S = TaskState, StepState
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def h(migrated_database_url: str) -> AsyncIterator[Harness]:
    store = await open_store(migrated_database_url)
    yield harness(store, Clock())
    await store.close()


async def attempt_of(h: Harness, spec: Any = None) -> tuple[str, int]:
    started = await running(h, spec)
    assert started.made is not None
    return started.made, started.task.state_version


async def test_a_stale_plan_revision_is_refused_and_changes_nothing(h: Harness) -> None:
    attempt, version = await attempt_of(h)
    await h.door.begin_step("lt-1", attempt, "s1", 1)  # the task moved on meanwhile
    before = await snapshot(h.store)
    with pytest.raises(LongTaskVersionConflict):
        await h.door.revise_plan("lt-1", version, ANA, "drop s3", steps=new_task().steps[:2])
    assert await snapshot(h.store) == before


async def test_a_stale_step_transition_is_refused_and_changes_nothing(h: Harness) -> None:
    attempt, _ = await attempt_of(h)
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    before = await snapshot(h.store)
    with pytest.raises(LongTaskVersionConflict):
        await h.door.complete_step("lt-1", attempt, "s1", 1, [NewEvidence("f", "a://", "x")])
    assert await snapshot(h.store) == before
    # new terms for a pending step move its version: the old terms are stale
    task = await h.sql.get_task("lt-1")
    assert task is not None
    renamed = (new_task().steps[0], StepDraft("s2", "send it twice", SideEffect.NON_IDEMPOTENT))
    await h.door.revise_plan("lt-1", task.state_version, ANA, "rename s2", steps=renamed)
    before = await snapshot(h.store)
    with pytest.raises(LongTaskVersionConflict):
        await h.door.begin_step("lt-1", attempt, "s2", 1)
    assert await snapshot(h.store) == before


async def test_a_stale_decision_answer_is_refused_and_changes_nothing(h: Harness) -> None:
    attempt, version = await attempt_of(h)
    asked = await h.door.request_decision("lt-1", attempt, "Which mailbox?")
    assert asked.decision is not None
    before = await snapshot(h.store)
    with pytest.raises(LongTaskVersionConflict):
        await h.door.answer("lt-1", asked.decision.id, version, ANA, "work")
    assert await snapshot(h.store) == before


async def test_a_step_action_without_the_lease_is_refused_and_changes_nothing(
    h: Harness,
) -> None:
    first, _ = await attempt_of(h)
    asked = await h.door.request_decision("lt-1", first, "Which mailbox?")
    assert asked.decision is not None
    answered = await h.door.answer("lt-1", asked.decision.id, asked.task.state_version, ANA, "x")
    second = await h.door.start_attempt("lt-1", SCHEDULER, answered.task.state_version)
    assert second.made is not None and second.task.lease is not None
    before = await snapshot(h.store)
    with pytest.raises(LongTaskLeaseNotHeld):  # the first attempt's lease is gone
        await h.door.begin_step("lt-1", first, "s1", 1)
    h.clock.now = second.task.lease.expires_at_ms  # and an expired lease is no lease
    with pytest.raises(LongTaskLeaseNotHeld):
        await h.door.begin_step("lt-1", second.made, "s1", 1)
    assert await snapshot(h.store) == before


class Fault(Exception):
    pass


@pytest.mark.parametrize("fault_after", ["step", "receipt"])
async def test_intent_and_receipt_are_atomic_with_the_step_change(
    h: Harness, monkeypatch: pytest.MonkeyPatch, fault_after: str
) -> None:
    attempt, _ = await attempt_of(h)
    await h.door.skip_step("lt-1", attempt, "s1", 1)
    await h.door.begin_step("lt-1", attempt, "s2", 1)
    before = await snapshot(h.store)
    real_update = h.sql.update_step

    async def update_then_fault(*args: Any) -> None:
        await real_update(*args)
        raise Fault("the process dies after the first write")

    monkeypatch.setattr(h.sql, "update_step", update_then_fault)
    with pytest.raises(Fault):  # the intent row is written, then the step, then the fault
        await h.door.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "report"))
    assert await snapshot(h.store) == before  # no intent, no step change, no event
    monkeypatch.undo()
    await h.door.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "report"))
    before = await snapshot(h.store)
    target = "update_step" if fault_after == "step" else "record_receipt"
    real = getattr(h.sql, target)

    async def write_then_fault(*args: Any) -> None:
        await real(*args)
        raise Fault(f"the process dies after the {fault_after} write")

    monkeypatch.setattr(h.sql, target, write_then_fault)
    with pytest.raises(Fault):
        await h.door.record_receipt("lt-1", attempt, "s2", 3, ReceiptIn("mail:boss", 1, "ok"))
    assert await snapshot(h.store) == before  # neither the receipt nor the step change
    [effect] = await h.sql.effects(None, "lt-1")
    assert effect.receipt is None


async def _completed(h: Harness) -> int:
    attempt, _ = await attempt_of(h)
    for step_id in ("s1", "s2", "s3"):
        await h.door.skip_step("lt-1", attempt, step_id, 1)
    await h.door.ready_for_verification("lt-1", attempt)
    proof = (NewEvidence("check", "file://r.md", "exists"),)
    done = await h.door.record_verification(
        "lt-1", attempt, [VerdictIn("c1", Source.CHECKER, CriterionResult.PASSED, proof)]
    )
    assert done.task.state is T.COMPLETED
    return done.task.state_version


async def test_continue_on_a_finished_task_opens_a_new_version_and_keeps_the_record(
    h: Harness,
) -> None:
    version = await _completed(h)
    go_on = await h.door.continue_task("lt-1", version, ANA, "do it again next week")
    assert (go_on.task.state, go_on.task.plan_version) == (T.QUEUED, 2)
    assert go_on.task.finished_at_ms is None
    old, new = await h.sql.plans("lt-1")
    assert (old.closed_state, new.closed_state) == (T.COMPLETED, None)
    [moved] = [e for e in await h.sql.events("lt-1") if e.type == "continue"]
    assert (moved.from_state, moved.to_state, moved.plan_version) == ("completed", "queued", 1)
    assert [s.state for s in await h.sql.steps(None, "lt-1", 1)] == [S.SKIPPED] * 3
    before = await snapshot(h.store)
    with pytest.raises(LongTaskVersionConflict):  # a stale continuation touches nothing
        await h.door.continue_task("lt-1", version, ANA, "again")
    assert await snapshot(h.store) == before


async def test_a_cancelled_task_never_restarts(h: Harness) -> None:
    created = await h.door.create(new_task(), ANA)
    cancelled = await h.door.cancel("lt-1", created.task.state_version, ANA)
    version = cancelled.task.state_version
    before = await snapshot(h.store)
    refusals = []
    commands: tuple[Callable[[], Awaitable[Changed]], ...] = (
        lambda: h.door.continue_task("lt-1", version, ANA, "please"),
        lambda: h.door.enqueue("lt-1", version, ANA),
        lambda: h.door.resume("lt-1", version, ANA),
        lambda: h.door.start_attempt("lt-1", SCHEDULER, version),
        lambda: h.door.revise_plan("lt-1", version, ANA, "new plan"),
    )
    for command in commands:
        with pytest.raises(InvalidLongTaskTransition) as refused:
            await command()
        refusals.append(refused.value.metadata["refusal"])
    assert refusals == ["TASK_CANCELLED", *["TASK_TERMINAL"] * 4]
    assert await snapshot(h.store) == before


async def test_completed_steps_keep_their_evidence_across_plan_revisions(h: Harness) -> None:
    attempt, _ = await attempt_of(h)
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    proof = NewEvidence("file", "artifact://r.md", "the report, 2 KiB")
    done = await h.door.complete_step("lt-1", attempt, "s1", 2, [proof])
    steps = (
        new_task().steps[0],
        StepDraft("s9", "send to the team", SideEffect.IDEMPOTENT, "s9-1"),
    )
    v2 = await h.door.revise_plan("lt-1", done.task.state_version, ANA, "new ending", steps=steps)
    s1 = (await h.sql.steps(None, "lt-1", 2))[0]
    assert (s1.step_id, s1.state, s1.plan_version) == ("s1", S.COMPLETED, 2)
    [evidence] = await h.sql.evidence(None, "lt-1")
    assert (evidence.step_id, evidence.reference) == ("s1", "artifact://r.md")
    assert s1.rules((evidence.id,)).evidence == (evidence.id,)
    # dropped by a later version, its evidence and its record stay
    await h.door.revise_plan("lt-1", v2.task.state_version, ANA, "only s9", steps=steps[1:])
    assert [e.id for e in await h.sql.evidence(None, "lt-1")] == [evidence.id]
    assert (await h.sql.steps(None, "lt-1", 2))[0].state is S.COMPLETED


async def test_a_persons_criterion_survives_a_later_model_plan_version(h: Harness) -> None:
    created = await h.door.create(new_task(author=PlanAuthor.MODEL), ANA)
    edited = [NewCriterion("c1", "the report file exists in /shared", "file_exists")]
    v2 = await h.door.revise_plan(
        "lt-1", created.task.state_version, ANA, "stricter c1", criteria=edited
    )
    model = [NewCriterion("c1", "any file exists", "file_exists", required=False)]
    v3 = await h.door.revise_plan(
        "lt-1", v2.task.state_version, ANA, "simpler", PlanAuthor.MODEL, criteria=model
    )
    [c1] = await h.sql.criteria(None, "lt-1", 3)
    assert (c1.criterion.text, c1.criterion.required) == ("the report file exists in /shared", True)
    assert (c1.criterion.author, c1.criterion.plan_version) == (PlanAuthor.USER, 2)
    assert v3.notes == ("a person's criteria kept as they wrote them: c1",)


async def test_one_receipt_cannot_satisfy_an_unrelated_criterion(h: Harness) -> None:
    criteria = (
        NewCriterion("c1", "the mail was sent", "receipt_present"),
        NewCriterion("c3", "the archive holds the report", "file_exists"),
    )
    attempt, _ = await attempt_of(h, new_task(criteria=criteria))
    for step_id in ("s1", "s3"):
        await h.door.skip_step("lt-1", attempt, step_id, 1)
    await h.door.begin_step("lt-1", attempt, "s2", 1)
    sent = await h.door.record_intent("lt-1", attempt, "s2", 2, Intent("mail:boss", "report"))
    await h.door.record_receipt("lt-1", attempt, "s2", 3, ReceiptIn("mail:boss", 1, "250 OK"))
    step_proof = NewEvidence("receipt", f"effect:{sent.made}", "250 OK", effect_id=sent.made)
    await h.door.complete_step("lt-1", attempt, "s2", 4, [step_proof])
    [bound_to_step] = await h.sql.evidence(None, "lt-1")
    await h.door.ready_for_verification("lt-1", attempt)
    receipt = NewEvidence("receipt", f"effect:{sent.made}", "250 OK", effect_id=sent.made)
    verdicts = [
        VerdictIn("c1", Source.CHECKER, CriterionResult.PASSED, (receipt,)),
        VerdictIn("c3", Source.CHECKER, CriterionResult.PASSED, cited=(bound_to_step.id,)),
    ]
    result = await h.door.record_verification("lt-1", attempt, verdicts)
    c1, c3 = await h.sql.criteria(None, "lt-1", 1)
    assert (c1.result, c3.result) == (CriterionResult.PASSED, CriterionResult.UNPROVEN)
    assert result.task.state is T.WAITING_FOR_USER  # never completed on the wrong evidence
    c1_evidence = [e.id for e in await h.sql.evidence(None, "lt-1") if e.criterion_id == "c1"]
    assert result.decision is not None
    await h.door.answer("lt-1", result.decision.id, result.task.state_version, ANA, "confirm")
    again = await h.door.start_attempt("lt-1", SCHEDULER)
    assert again.made is not None
    await h.door.ready_for_verification("lt-1", again.made)
    cited = VerdictIn("c3", Source.CHECKER, CriterionResult.PASSED, cited=tuple(c1_evidence))
    second = await h.door.record_verification("lt-1", again.made, [cited])
    assert second.task.state is T.WAITING_FOR_USER  # c1's receipt proves nothing for c3


def _json_reads(path: Path) -> list[tuple[str, int]]:
    """(function, line) of every json.loads / json_bounds.stored / display_json call."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute | ast.Name):
                    name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
                    if name in ("loads", "stored", "display_json"):
                        found.append((node.name, call.lineno))
    return found


async def test_no_state_field_is_read_from_json(h: Harness) -> None:
    # by inspection: only the display reads parse JSON (the store's, the API's conversion
    # to Structs, the recovery prompt's words from a decision's material, and the server
    # checkers' parameters, where a damaged one proves nothing); the door never does
    reads = {
        p.relative_to(ROOT).as_posix(): {f for f, _ in _json_reads(p)}
        for p in sorted((ROOT / "longtasks").rglob("*.py"))
        if _json_reads(p)
    }
    assert reads == {
        "longtasks/store/rows.py": {"display_json"},
        "longtasks/store/sql.py": {"task_display", "tasks_of_project"},
        "longtasks/api/convert.py": {"struct_of", "decision_to_proto"},
        "longtasks/api/briefing.py": {"server_side"},
        "longtasks/domain/progress.py": {"recovery_prompt"},
    }
    # and in the rows: every display payload damaged, the state machine goes on
    attempt, _ = await attempt_of(h)
    await h.door.begin_step("lt-1", attempt, "s1", 1)
    await h.door.complete_step("lt-1", attempt, "s1", 2, [NewEvidence("f", "a://", "x")])
    asked = await h.door.request_approval("lt-1", attempt, "send:boss", "Send it?")
    for table, columns in {
        "long_tasks": ("constraints", "sources"),
        "long_task_steps": ("probe_spec",),
        "long_task_criteria": ("checker_spec",),
        "long_task_evidence": ("render",),
        "long_task_decisions": ("options", "material"),
    }.items():
        damage = ", ".join(f"{c} = '{{not json'" for c in columns)
        await execute(h.store, f"UPDATE {table} SET {damage}")
    assert asked.decision is not None
    granted = await h.door.answer("lt-1", asked.decision.id, asked.task.state_version, ANA, "grant")
    assert granted.task.state is T.RUNNING
    version = await step_version(h, "lt-1", "s2")
    await h.door.begin_step("lt-1", attempt, "s2", version)
    assert (await h.door.mark_uncertain("lt-1", attempt, "s2", version + 1)).step is not None
    assert await h.sql.task_display("lt-1") == {"constraints": None, "sources": None}


async def test_two_answers_to_one_decision_at_once_one_wins(migrated_database_url: str) -> None:
    stores = [await open_store(migrated_database_url) for _ in range(2)]
    try:
        clock = Clock()
        first, second = (harness(store, clock) for store in stores)
        attempt, _ = await attempt_of(first)
        asked = await first.door.request_decision("lt-1", attempt, "Which mailbox?")
        assert asked.decision is not None
        answers = await asyncio.gather(
            *(
                h.door.answer("lt-1", asked.decision.id, asked.task.state_version, ANA, word)
                for h, word in ((first, "work"), (second, "home"))
            ),
            return_exceptions=True,
        )
        won = [a for a in answers if not isinstance(a, BaseException)]
        lost = [a for a in answers if isinstance(a, BaseException)]
        assert len(won) == 1 and len(lost) == 1, answers
        assert isinstance(lost[0], LongTaskVersionConflict)
        [decision] = await second.sql.decisions(None, "lt-1")
        winner = won[0].decision
        assert winner is not None and decision.answer == winner.answer
        events = [e.type for e in await second.sql.events("lt-1")]
        assert events.count("decision_answered") == 1
    finally:
        for store in stores:
            await store.close()
