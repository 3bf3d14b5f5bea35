"""Activation and lazy promotion through the door (docs/long-tasks.md "Activation and
promotion"). An ordinary run's runtime asks before a non-pure tool call (``preflight``),
reports its classifier's verdict (``record_verdict``), and on a promote verdict, a budget
threshold or an explicit multi-stage plan turns its run into a long task (``promote``).

Each is one transaction opened through the coordinator's door; the run's facts are run
events appended by ``Transitions.execute_in`` (``NoteRun``), never written here. A promotion
writes the task, its plan (the executed prefix absorbed in order, then the declared
remaining steps), the effects and receipts of the absorbed calls, the criteria, and the run
linked as the task's first attempt holding the lease, all in one commit. If any of it
fails, nothing of it is kept, and a second transaction notes the failure on the run and
requests its cancel: the runtime is answered ``PROMOTION_FAILED`` and stops; the run never
goes on unmanaged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.service.transitions import DoorTx, Result
from kernel.errors import (
    AutoPromotionRefused,
    DomainError,
    InvalidArgument,
    InvalidTransition,
    PromotionFailed,
    Unauthenticated,
)
from longtasks.domain.activation import (
    Path,
    Preflight,
    PreflightAnswer,
    Verdict,
    absorbed_steps,
    absorbed_words,
    preflight,
    with_effect,
)
from longtasks.domain.model import (
    Attempt,
    Lease,
    PlanVersion,
    Task,
)
from longtasks.domain.plans import plan_refusal
from longtasks.domain.queue import unfinished_cap_refusal
from longtasks.domain.rules import Moved, TaskCommand, decide_task
from longtasks.domain.states import PlanAuthor, SideEffect, TaskState
from longtasks.service.base import DoorBase
from longtasks.service.errors import task_error
from longtasks.service.inputs import Changed, NewTask
from longtasks.service.promotion_rows import (
    Promotion,
    absorbed_effect,
    as_draft,
    criteria_of,
    first_events,
    note,
    receipt_evidence,
    stored_receipt,
    verdict_details,
)
from longtasks.service.tasks import _check_criteria, _new_task, handle_lock
from longtasks.store.rows import dumps
from longtasks.store.sql import TaskExists

log = logging.getLogger(__name__)
C = TaskCommand
#: Told of every decided preflight: (tier, verdict, seconds from the ask to the verdict).
PreflightListener = Callable[[str, str, float], None]


@dataclass(frozen=True, slots=True)
class PreflightOutcome:
    answer: PreflightAnswer
    evaluated: tuple[SideEffect, ...]  # the tiers evaluated before this ask
    long_task_id: str = ""  # the run is this task's attempt already: no preflight


class Promotions(DoorBase):
    _preflight_listeners: tuple[PreflightListener, ...] = ()

    def listen_preflights(self, listener: PreflightListener) -> None:
        self._preflight_listeners = (*self._preflight_listeners, listener)

    async def preflight(self, run_id: str, tier: SideEffect, actor: Actor) -> PreflightOutcome:
        """Whether the run's tool call of ``tier`` needs a preflight; if so the tier is
        recorded as evaluated (at most once per run and tier) and the run notes it."""
        linked = await self._sql.attempt_of_run(run_id)
        if linked is not None:
            why = PreflightAnswer(Preflight.ALLOWED, "the run is a long task's attempt")
            return PreflightOutcome(why, (), linked.task_id)
        results: list[Result] = []
        async with self._transitions.transaction([]) as tx:
            evaluated = tuple(
                SideEffect(row.tier) for row in await self._sql.preflights(tx, run_id)
            )
            answer = preflight(evaluated, tier)
            if answer.answer is Preflight.PREFLIGHT_NEEDED:
                if not await self._sql.insert_preflight(tx, run_id, tier.value, self._clock()):
                    answer = PreflightAnswer(Preflight.ALLOWED, f"the {tier} tier raced")
                else:
                    asked = note(run_id, actor, "activation.preflight_requested", tier=tier.value)
                    results.append(await self._transitions.execute_in(tx, asked))
        self._transitions.published(results)
        return PreflightOutcome(answer, evaluated)

    async def record_verdict(
        self,
        run_id: str,
        tier: SideEffect,
        verdict: Verdict,
        reason: str,
        confidence: float | None,
        actor: Actor,
    ) -> None:
        """The classifier's verdict on the tier's preflight: kept on its row (once) and
        noted on the run with its path, reason and confidence."""
        now = self._clock()
        async with self._transitions.transaction([]) as tx:
            rows = {row.tier: row for row in await self._sql.preflights(tx, run_id)}
            row = rows.get(tier.value)
            args = (run_id, tier.value, verdict.value, Path.LAZY.value, reason, confidence, now)
            if row is None or not await self._sql.decide_preflight(tx, *args):
                raise InvalidArgument(
                    f"run {run_id} has no open preflight of the {tier} tier "
                    "(never asked for, or decided already)",
                    run_id=run_id,
                )
            details = verdict_details(verdict, Path.LAZY, reason, confidence)
            details["tier"] = tier.value
            classified = note(run_id, actor, "activation.classified", **details)
            result = await self._transitions.execute_in(tx, classified)
        self._transitions.published([result])
        for listener in self._preflight_listeners:
            try:
                listener(tier.value, verdict.value, max(0, now - row.requested_at_ms) / 1000)
            except Exception:
                log.exception("a preflight listener failed")

    async def promote(
        self,
        run_id: str,
        run_attempt_id: str,
        promotion: Promotion,
        actor: Actor,
        max_unfinished: int = 0,
    ) -> Changed:
        """The run becomes a long task in one transaction, or nothing of it is kept and the
        run is stopped with the reason. A run promoted already answers its task again."""
        try:
            return await self._promote(run_id, run_attempt_id, promotion, actor, max_unfinished)
        except (AutoPromotionRefused, Unauthenticated, InvalidTransition) as refused:
            if isinstance(refused, AutoPromotionRefused):
                await self._note_quietly(
                    run_id, actor, "activation.promotion_refused", reason=refused.message
                )
            raise
        except Exception as error:
            why = error.message if isinstance(error, DomainError) else type(error).__name__
            if not isinstance(error, DomainError):
                log.exception("promoting run %s failed", run_id)
            await self._fail_run(run_id, actor, f"promotion failed: {why}")
            raise PromotionFailed(
                f"run {run_id} could not become a long task ({why}); nothing of it was "
                "kept and the run was told to stop",
                run_id=run_id,
            ) from error

    async def _promote(
        self,
        run_id: str,
        run_attempt_id: str,
        promotion: Promotion,
        actor: Actor,
        max_unfinished: int,
    ) -> Changed:
        now = self._clock()
        results: list[Result] = []
        run = await self._transitions.reader.load(run_id)
        if run is None or run.run.current_attempt_id != run_attempt_id:  # a retried run's old
            raise Unauthenticated(f"run attempt {run_attempt_id} is not run {run_id}'s current")
        owner = run.run.owner_id
        locks = [f"run_promotion:{run_id}", handle_lock(owner)]
        async with self._transitions.transaction(locks) as tx:
            loaded = await tx.load(run_id, None)
            assert loaded is not None
            if loaded.run.status.terminal:
                raise InvalidTransition(
                    f"run {run_id} is {loaded.run.status.value}: a finished run is not promoted",
                    run_id=run_id,
                )
            linked = await self._sql.attempt_of_run(run_id)  # read after the run's lock
            if linked is not None:
                task = await self._sql.lock_task(tx, linked.task_id)
                assert task is not None
                return Changed(task, made=linked.id, run_id=run_id)
            new = replace(
                promotion.new,
                project_id=loaded.run.project_id,
                owner_id=owner,
                agent_id=loaded.run.agent_id,
                author=PlanAuthor.MODEL,
                reason=f"promoted from run {run_id} ({promotion.path})",
            )
            refused = unfinished_cap_refusal(
                await self._sql.unfinished_in(tx, new.owner_id), max_unfinished
            )
            if refused is not None:
                raise AutoPromotionRefused(
                    f"automatic promotion refused: {refused} (an explicit CreateLongTask "
                    "with override_unfinished_cap still may)",
                    owner_id=new.owner_id,
                )
            task, attempt_id = await self._write_task(tx, new, promotion, run_id, actor, now)
            details = verdict_details(Verdict.PROMOTE, promotion.path, promotion.reason, None)
            if promotion.confidence is not None:
                details["confidence"] = promotion.confidence
            promoted = note(
                run_id,
                actor,
                "activation.promoted",
                **details,
                long_task_id=task.id,
                absorbed=absorbed_words(promotion.calls),
            )
            results.append(await self._transitions.execute_in(tx, promoted))
        self._transitions.published(results)
        return Changed(task, made=attempt_id, run_id=run_id)

    async def _write_task(
        self,
        tx: DoorTx,
        new: NewTask,
        promotion: Promotion,
        run_id: str,
        actor: Actor,
        now: int,
    ) -> tuple[Task, str]:
        calls, task_id, attempt_id = promotion.calls, self._new_id(), self._new_id()
        refused = plan_refusal([*(as_draft(call) for call in calls), *new.steps])
        if refused is not None:  # step ids must be unique across the prefix and the rest
            raise task_error(refused, task_id)
        missing = [
            x.step_id for x in calls if x.has_receipt and x.step_id not in promotion.receipts
        ]
        if missing:
            raise InvalidArgument(f"absorbed calls {missing} claim a receipt but send none")
        _check_criteria(new.criteria)
        events = first_events(run_id, promotion, attempt_id)
        created = decide_task(None, C.CREATE)
        assert isinstance(created, Moved)
        task = _new_task(task_id, new, actor, now, created)
        task = replace(
            task,
            state=TaskState.RUNNING,
            lease=Lease(attempt_id, run_id, now + self._lease_ms),
            budget=replace(task.budget, attempts_used=1),
            handle=await self._sql.next_handle(tx, new.owner_id),
            event_sequence=len(events),
            source_run_id=run_id,
        )
        try:
            await self._sql.insert_task(
                tx, task, dumps(list(new.constraints)), dumps(list(new.sources))
            )
        except TaskExists:
            raise InvalidArgument(f"long task {task_id} exists already") from None
        plan = PlanVersion(task_id, 1, new.author, new.reason, actor.id, now)
        await self._sql.insert_plan(tx, plan)
        await self._sql.insert_attempt(tx, Attempt(attempt_id, task_id, 1, run_id, 1, now))
        steps = list(absorbed_steps(task_id, calls, new.steps, now))
        for index, call in enumerate(calls):
            effect = absorbed_effect(self._new_id(), task_id, attempt_id, call, now)
            steps[index] = with_effect(steps[index], effect.id, call.has_receipt)
            await self._sql.insert_effect(tx, effect)
            receipt = promotion.receipts.get(call.step_id) if call.has_receipt else None
            if receipt is not None:
                await self._sql.record_receipt(tx, effect, stored_receipt(receipt, now))
                cited = receipt_evidence(self._new_id(), effect, receipt, now)
                await self._sql.insert_evidence(tx, cited)
        await self._sql.insert_steps(tx, steps)
        await self._sql.insert_criteria(tx, task_id, 1, criteria_of(new))
        stamped = [
            replace(
                e, sequence=n, actor_type=actor.type.value, actor_id=actor.id, created_at_ms=now
            )
            for n, e in enumerate(events, 1)
        ]
        await self._sql.append(tx, task_id, stamped)
        return task, attempt_id

    async def _fail_run(self, run_id: str, actor: Actor, why: str) -> None:
        """The failure noted on the run and its cancel requested, in one transaction."""
        try:
            async with self._transitions.transaction([]) as tx:
                failed = note(run_id, actor, "activation.promotion_failed", reason=why)
                noted = await self._transitions.execute_in(tx, failed)
                cancel = c.RequestCancel(run_id, actor, reason=why[:200])
                cancelled = await self._transitions.execute_in(tx, cancel)
            self._transitions.published([noted, cancelled])
        except Exception:
            log.exception("stopping run %s after its failed promotion failed too", run_id)

    async def _note_quietly(self, run_id: str, actor: Actor, type_: str, **details: object) -> None:
        try:
            async with self._transitions.transaction([]) as tx:
                result = await self._transitions.execute_in(
                    tx, note(run_id, actor, type_, **details)
                )
            self._transitions.published([result])
        except Exception:
            log.exception("noting %s on run %s failed", type_, run_id)
