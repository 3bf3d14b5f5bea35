"""The lease holder's task-level actions: ask a person a question (the attempt ends: a
decision may wait for days, and a new attempt carries the answer out), ask for an approval
(the attempt waits, holding its lease), declare the steps done (``ready_for_verification``:
the model's "done" is never ``completed``), and record the verifier's verdicts, from which
the pure completion rules decide (``completion.evaluate``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kernel.errors import InvalidArgument
from longtasks.domain.boundary import Boundary, boundary_command
from longtasks.domain.completion import Completion, Outcome, Source, Verdict, evaluate
from longtasks.domain.decisions import ApprovalAnswer, VerificationAnswer
from longtasks.domain.findings import disputed_completion
from longtasks.domain.model import CriterionRecord, Evidence
from longtasks.domain.rules import (
    Refusal,
    Refused,
    TaskCommand,
    decide_task,
    verification_refusal,
)
from longtasks.domain.states import AttemptOutcome, CriterionResult, DecisionKind, StepState
from longtasks.service.base import DoorBase, Work
from longtasks.service.errors import step_error, task_error
from longtasks.service.inputs import Changed, VerdictIn
from longtasks.service.steps import attempt_actor

C = TaskCommand


class Asks(DoorBase):
    async def request_decision(
        self,
        task_id: str,
        attempt_id: str,
        question: str,
        options: Sequence[str] = (),
        material: str = "{}",
    ) -> Changed:
        """A question only a person can answer: the task waits for them, and this attempt
        ends (no step may be running: block or finish it first). ``decision``: the question."""

        async def change(work: Work) -> None:
            running = [s for s in await self._steps(work) if s.state is StepState.RUNNING]
            if running:
                why = f"step {running[0].step_id} is running: block or finish it first"
                raise step_error(Refused(Refusal.OPEN_STEP, why), task_id, running[0].step_id)
            self._move(work, C.REQUEST_DECISION, question[:1024])
            work.decision = await self._ask(
                work, DecisionKind.QUESTION, question, options, material, attempt_id=attempt_id
            )
            attempt = await self._attempt(work, attempt_id)
            await self._end_attempt(work, attempt, AttemptOutcome.ASKED_USER, "asked a person")

        return await self._act(task_id, attempt_actor(attempt_id), change, holder=attempt_id)

    async def request_approval(
        self, task_id: str, attempt_id: str, subject: str, question: str, material: str = "{}"
    ) -> Changed:
        """A grant of one exact action (``subject``), scoped to this attempt, which waits
        for it holding the lease; the repeat count says how often this task asked for the
        same action (seed: "这是第 N 次请求同一授权")."""

        async def change(work: Work) -> None:
            self._move(work, C.REQUEST_APPROVAL, question[:1024])
            asked = [
                d
                for d in await self._sql.decisions(work.tx, task_id)
                if d.kind is DecisionKind.APPROVAL and d.subject == subject
            ]
            work.decision = await self._ask(
                work,
                DecisionKind.APPROVAL,
                question,
                list(ApprovalAnswer),
                material,
                attempt_id=attempt_id,
                subject=subject,
                repeat=len(asked) + 1,
            )

        return await self._act(task_id, attempt_actor(attempt_id), change, holder=attempt_id)

    async def ready_for_verification(self, task_id: str, attempt_id: str) -> Changed:
        """The attempt says the steps are done: the criteria are checked next (no step may
        be running or uncertain: every effect settled first)."""

        async def change(work: Work) -> None:
            steps = await self._steps(work)
            refused = verification_refusal(s.rules() for s in steps)
            if refused is not None:
                raise task_error(refused, task_id)
            self._move(work, C.READY_FOR_VERIFICATION, "the attempt declared its steps done")

        return await self._act(task_id, attempt_actor(attempt_id), change, holder=attempt_id)

    async def record_verification(
        self, task_id: str, attempt_id: str, verdicts: Sequence[VerdictIn]
    ) -> Changed:
        """The verifier's verdicts; ``completion.evaluate`` decides: every required criterion
        passed with evidence bound to it -> completed; a failed one -> a correction round
        while they last, else partial (failed with no useful result: ``boundary.py``);
        unproven -> a person is asked (never completed)."""

        async def change(work: Work) -> None:
            refused = decide_task(work.task.state, C.VERIFICATION_PASSED)
            if isinstance(refused, Refused):
                raise task_error(refused, task_id)
            task = work.task
            records = await self._sql.criteria(work.tx, task.id, task.plan_version)
            given = await self._verdicts(work, records, verdicts, attempt_id)
            evidence = await self._evidence(work)
            people = [
                Verdict(
                    r.criterion.id,
                    Source.USER,
                    r.result,
                    tuple(e.ref() for e in evidence if e.criterion_id == r.criterion.id),
                )
                for r in records
                if r.result_source == Source.USER
            ]
            completion = evaluate([r.criterion for r in records], [*people, *given])
            await self._results(work, records, completion, given)
            await self._settle(work, completion, attempt_id)

        return await self._act(task_id, attempt_actor(attempt_id), change, holder=attempt_id)

    async def _verdicts(
        self,
        work: Work,
        records: Sequence[CriterionRecord],
        verdicts: Sequence[VerdictIn],
        attempt_id: str,
    ) -> list[Verdict]:
        """The verdicts as the rules read them: new evidence stored bound to its criterion,
        cited evidence as stored (bound to whatever it was produced for)."""
        known = {r.criterion.id for r in records}
        stored = {e.id: e for e in await self._evidence(work)}
        out = []
        for v in verdicts:
            if v.criterion_id not in known:
                raise InvalidArgument(f"no criterion {v.criterion_id} in the current plan")
            refs = []
            for item in v.evidence:
                evidence = Evidence(
                    id=self._new_id(),
                    task_id=work.task.id,
                    kind=item.kind,
                    reference=item.reference,
                    summary=item.summary,
                    criterion_id=v.criterion_id,
                    render=item.render,
                    effect_id=item.effect_id,
                    attempt_id=attempt_id,
                    created_at_ms=work.now,
                )
                await self._sql.insert_evidence(work.tx, evidence)
                refs.append(evidence.ref())
            for cited in v.cited:
                if cited not in stored:
                    raise InvalidArgument(f"no evidence {cited} in this task")
                refs.append(stored[cited].ref())
            out.append(Verdict(v.criterion_id, v.source, v.result, tuple(refs)))
        return out

    async def _results(
        self,
        work: Work,
        records: Sequence[CriterionRecord],
        completion: Completion,
        given: Sequence[Verdict],
    ) -> None:
        sources = {v.criterion_id: v.source.value for v in given}
        task = work.task
        plans = None
        for record in records:
            cid = record.criterion.id
            result = completion.results[cid]
            source = sources.get(cid, record.result_source)
            if result is record.result and source == record.result_source:
                continue
            await self._sql.set_result(
                work.tx, task.id, task.plan_version, cid, result, source or "", work.now
            )
            work.note("criterion_result", f"{cid}: {result} ({source})")
            if record.result is CriterionResult.PASSED and result is not record.result:
                plans = plans or await self._sql.plans(task.id, work.tx)
                completed = disputed_completion(record, result, plans)
                if completed is not None:  # the release metric's finding, in the log too
                    version = completed.version
                    why = f"{cid} passed when plan version {version} completed: now {result}"
                    work.note("completion_disputed", why)

    async def _settle(self, work: Work, completion: Completion, attempt_id: str) -> None:
        attempt = await self._attempt(work, attempt_id)
        why = completion.why
        if completion.outcome is Outcome.COMPLETED:
            self._move(work, C.VERIFICATION_PASSED, why)
        elif completion.outcome is Outcome.PARTIAL:
            task = work.task
            if task.corrections_used < task.max_corrections:
                work.task = replace(task, corrections_used=task.corrections_used + 1)
                self._move(work, C.START_CORRECTION, f"{why}: correcting")
                return  # the same attempt corrects, holding its lease
            steps = [s.state for s in await self._steps(work)]
            ending = boundary_command(Boundary.CORRECTIONS, steps, completion.results.values())
            self._move(work, ending, f"{why}; unmet: {completion.unmet}")
        else:
            self._move(work, C.REQUEST_DECISION, why)
            question = f"Confirm the criteria that could not be proven: {list(completion.unmet)}"
            work.decision = await self._ask(
                work, DecisionKind.VERIFICATION, question, list(VerificationAnswer), "{}"
            )
            await self._end_attempt(work, attempt, AttemptOutcome.ASKED_USER, why)
            return
        await self._end_attempt(work, attempt, AttemptOutcome.VERIFIED, why)
