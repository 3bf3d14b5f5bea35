"""A person's (or the model's) word on a task: a new plan version (``revise_plan``; also how
a criterion is waived or edited), ``continue`` on a finished task (a new plan version in
``queued``, the old version keeping its terminal state as its record), and the answer to a
decision. Each is one transaction of the door and carries the task's expected version."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coordinator.domain.model import Actor
from kernel.errors import LongTaskNotFound
from longtasks.domain.actions import ActionRecord
from longtasks.domain.completion import Criterion, Source, revise_criteria
from longtasks.domain.decisions import (
    EFFECT_MOVES,
    VERIFICATION_RESULTS,
    EffectAnswer,
    VerificationAnswer,
    answer_refusal,
    task_command,
)
from longtasks.domain.model import CriterionRecord, Decision, Evidence, PlanVersion, StepDraft
from longtasks.domain.plans import revise_steps
from longtasks.domain.rules import Refused, StepCommand, TaskCommand
from longtasks.domain.states import (
    Basis,
    CriterionResult,
    DecisionKind,
    DecisionState,
    PlanAuthor,
    TaskState,
)
from longtasks.service.base import DoorBase, Work
from longtasks.service.errors import task_error
from longtasks.service.inputs import Changed, NewCriterion
from longtasks.store.rows import dumps

C = TaskCommand


class Revisions(DoorBase):
    async def revise_plan(
        self,
        task_id: str,
        expected_version: int,
        actor: Actor,
        reason: str,
        author: PlanAuthor = PlanAuthor.USER,
        steps: Sequence[StepDraft] | None = None,
        criteria: Sequence[NewCriterion] | None = None,
        goal: str | None = None,
        constraints: Sequence[str] | None = None,
    ) -> Changed:
        """A new plan version (None: keep the current steps, criteria, goal or
        constraints). Steps that ran keep their state and evidence (``domain/plans.py``); a
        criterion a person wrote survives a model's revision (``completion.revise_criteria``);
        the old version is kept, closed with the state the task was in. A new goal or new
        constraints are the task's from this version on (the task row, in the same
        transaction)."""

        async def change(work: Work) -> None:
            self._move(work, C.REVISE_PLAN, reason)
            await self._new_version(work, author, reason, steps, criteria, work.before.state)
            if goal is not None:
                work.task = replace(work.task, goal=goal)
            if constraints is not None:
                await self._sql.update_constraints(work.tx, task_id, dumps(list(constraints)))

        return await self._act(task_id, actor, change, expected_version=expected_version)

    async def continue_task(
        self,
        task_id: str,
        expected_version: int,
        actor: Actor,
        reason: str,
        steps: Sequence[StepDraft] | None = None,
        criteria: Sequence[NewCriterion] | None = None,
        action: ActionRecord | None = None,
    ) -> Changed:
        """Go on with a finished task: never reopening it. Its plan version keeps the
        terminal state as its record; a new version starts in ``queued`` (its attempt comes
        from ``start_attempt``). A cancelled task never continues (``TASK_CANCELLED``)."""

        async def change(work: Work) -> None:
            closed = work.task.state
            self._move(work, C.CONTINUE, reason)
            await self._new_version(work, PlanAuthor.USER, reason, steps, criteria, closed)

        return await self._act(
            task_id, actor, change, expected_version=expected_version, action=action
        )

    async def _new_version(
        self,
        work: Work,
        author: PlanAuthor,
        reason: str,
        drafts: Sequence[StepDraft] | None,
        proposed: Sequence[NewCriterion] | None,
        closed: TaskState,
    ) -> None:
        task, old = work.task, work.task.plan_version
        version = old + 1
        current = await self._steps(work)
        wanted = [s.draft() for s in current] if drafts is None else list(drafts)
        steps = revise_steps(task.id, current, wanted, version, work.now)
        if isinstance(steps, Refused):
            raise task_error(steps, task.id)
        records = await self._sql.criteria(work.tx, task.id, old)
        criteria, kept = self._revised(records, proposed, author, version)
        await self._sql.close_plan(work.tx, task.id, old, closed, work.now)
        plan = PlanVersion(task.id, version, author, reason, work.actor.id, work.now)
        await self._sql.insert_plan(work.tx, plan)
        await self._sql.insert_steps(work.tx, steps)
        await self._sql.insert_criteria(work.tx, task.id, version, criteria)
        work.task = replace(task, plan_version=version, verify_interruptions=0, corrections_used=0)
        work.note("plan_version", f"plan version {version} by {author}: {reason}")
        if kept:
            why = f"a person's criteria kept as they wrote them: {', '.join(kept)}"
            work.note("criteria_kept", why)
            work.notes.append(why)

    def _revised(
        self,
        records: Sequence[CriterionRecord],
        proposed: Sequence[NewCriterion] | None,
        author: PlanAuthor,
        version: int,
    ) -> tuple[list[CriterionRecord], tuple[str, ...]]:
        """The criteria of the new version (an unchanged one keeps its result) and the ids
        of a person's criteria the revision tried to change or drop."""
        current = [r.criterion for r in records]
        specs = {r.criterion.id: r.checker_spec for r in records}
        wanted = current
        if proposed is not None:
            wanted = [
                Criterion(n.criterion_id, n.text, n.checker_kind, n.required) for n in proposed
            ]
            specs |= {n.criterion_id: n.checker_spec for n in proposed}
        revision = revise_criteria(current, wanted, author, version)
        before = {r.criterion.id: r for r in records}
        out = []
        for position, criterion in enumerate(revision.criteria, 1):
            old = before.get(criterion.id)
            if old is not None and old.criterion == criterion:  # unchanged: its result stays
                out.append(replace(old, position=position))
            else:
                out.append(CriterionRecord(criterion, position, specs.get(criterion.id, "{}")))
        return out, revision.kept

    async def answer(
        self,
        task_id: str,
        decision_id: str,
        expected_version: int,
        actor: Actor,
        answer: str,
        note: str = "",
        action: ActionRecord | None = None,
    ) -> Changed:
        """Answer an open decision, once (``domain/decisions.py``): an approval lets its
        attempt go on; any other answer sends the task to ``queued`` for a new attempt, an
        effect answer moving its step on the basis ``user`` and a verification answer
        giving each required subjective criterion not yet confirmed a person's verdict."""

        async def change(work: Work) -> None:
            decision = await self._decision(work, decision_id)
            refused = answer_refusal(decision.state, decision.kind, answer)
            if refused is not None:
                raise task_error(refused, task_id)
            command = task_command(decision.kind, answer)
            self._move(work, command, f"{decision.kind} answered by {actor.id}: {answer}")
            answered = replace(
                decision,
                state=DecisionState.ANSWERED,
                answer=answer,
                note=note,
                answered_by=actor.id,
                answered_at_ms=work.now,
            )
            await self._sql.close_decision(work.tx, answered)
            work.decision = answered
            if decision.kind is DecisionKind.EFFECT:
                await self._answer_effect(work, answered)
            elif decision.kind is DecisionKind.VERIFICATION:
                await self._answer_verification(work, answered)

        return await self._act(
            task_id, actor, change, expected_version=expected_version, action=action
        )

    async def _decision(self, work: Work, decision_id: str) -> Decision:
        for decision in await self._sql.decisions(work.tx, work.task.id):
            if decision.id == decision_id:
                return decision
        raise LongTaskNotFound(
            f"long task {work.task.id} has no decision {decision_id}",
            task_id=work.task.id,
            decision_id=decision_id,
        )

    async def _answer_effect(self, work: Work, decision: Decision) -> None:
        assert decision.step_id is not None and decision.answer is not None
        step = await self._step(work, decision.step_id, None)
        command = EFFECT_MOVES[EffectAnswer(decision.answer)]
        if command is StepCommand.BEGIN:
            # a retry runs the step, so it needs an attempt: the next one begins it on this
            granted = replace(step, granted_by=decision.id)
            why = f"a person allowed a retry (decision {decision.id})"
            await self._write_step(work, step, granted, "retry_allowed", why)
            return
        facts = await self._rules(work, step)
        moved = self._decide_step(work, step, facts, command, Basis.USER)
        if command is StepCommand.COMPLETE:
            await self._answered_evidence(work, decision, step_id=step.step_id)
        after = replace(step, state=moved.after, basis=Basis.USER, granted_by=None)
        await self._write_step(work, step, after, command, f"{command} on a person's answer")

    async def _answer_verification(self, work: Work, decision: Decision) -> None:
        assert decision.answer is not None
        result = VERIFICATION_RESULTS[VerificationAnswer(decision.answer)]
        task = work.task
        for record in await self._sql.criteria(work.tx, task.id, task.plan_version):
            c = record.criterion
            if not (c.required and c.subjective) or record.result_source == Source.USER:
                continue  # only a person's word completes a subjective criterion
            await self._sql.set_result(
                work.tx, task.id, task.plan_version, c.id, result, Source.USER.value, work.now
            )
            if result is CriterionResult.PASSED:
                await self._answered_evidence(work, decision, criterion_id=c.id)
            work.note("criterion_result", f"{c.id}: {result} (a person's answer)")

    async def _answered_evidence(
        self,
        work: Work,
        decision: Decision,
        step_id: str | None = None,
        criterion_id: str | None = None,
    ) -> None:
        """A person's answer as evidence, bound to the one step or criterion it is about."""
        evidence = Evidence(
            id=self._new_id(),
            task_id=work.task.id,
            kind="answer",
            reference=f"decision:{decision.id}",
            summary=f"{decision.answered_by} answered {decision.answer!r}: {decision.note}"[:2048],
            step_id=step_id,
            criterion_id=criterion_id,
            created_at_ms=work.now,
        )
        await self._sql.insert_evidence(work.tx, evidence)
