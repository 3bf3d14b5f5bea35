"""The step actions of the attempt holding the lease (the runtime's step context maps onto
these one to one): begin, record the intent before an effect, record its receipt after,
record a probe's answer, complete with evidence, mark uncertain, block, fail, skip.

Each is one transaction of the door: the lease checked and renewed, the step's expected
version compared, the move decided by ``rules.decide_step``, the step and the task written
compare-and-set, the event appended. The intent and the receipt are written in the same
transaction as the step's change: a fault anywhere leaves none of them.

The attempt never names a basis itself: when it moves an uncertain step, the door takes the
basis from the step's record, by the recovery rules (``recovery.recover_step``) or a
person's answer allowing a retry; anything else is refused (``BASIS_REQUIRED``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from kernel.errors import InvalidArgument
from longtasks.domain.findings import duplicate_of
from longtasks.domain.model import Effect, Evidence, PlanStep, Receipt, Step
from longtasks.domain.plans import intent_key_refusal
from longtasks.domain.recovery import recover_step
from longtasks.domain.rules import Refusal, Refused, StepCommand
from longtasks.domain.states import Basis, ProbeResult, SideEffect, StepState, TaskState
from longtasks.service.base import DoorBase, Work
from longtasks.service.errors import step_error
from longtasks.service.inputs import Changed, Intent, NewEvidence, ReceiptIn

SC = StepCommand
StepBody = Callable[[Work, PlanStep], Awaitable[None]]


def attempt_actor(attempt_id: str) -> Actor:
    """Who a step action is recorded as: the attempt (its runtime acts for it)."""
    return Actor(ActorType.RUNTIME, attempt_id)


class StepActions(DoorBase):
    async def _on_step(
        self,
        task_id: str,
        attempt_id: str,
        step_id: str,
        expected_version: int,
        body: StepBody,
    ) -> Changed:
        async def change(work: Work) -> None:
            await body(work, await self._step(work, step_id, expected_version))

        return await self._act(task_id, attempt_actor(attempt_id), change, holder=attempt_id)

    async def _move_step(
        self,
        work: Work,
        step: PlanStep,
        command: StepCommand,
        why: str = "",
        evidence: Sequence[NewEvidence] = (),
        **changes: Any,
    ) -> PlanStep:
        """Decide ``command`` on ``step`` and write it, with ``changes`` to its record."""
        facts = await self._rules(work, step)
        basis = self._derived_basis(step, facts, command)
        refs = tuple(self._new_id() for _ in evidence)
        moved = self._decide_step(work, step, facts, command, basis, refs)
        attempt_id = work.task.lease.attempt_id if work.task.lease else None
        for ref, item in zip(refs, evidence, strict=True):
            await self._sql.insert_evidence(
                work.tx, _evidence(ref, work, step.step_id, attempt_id, item)
            )
        after = replace(step, state=moved.after, **changes)
        if basis is not None:
            after = replace(after, basis=basis)
        message = why or f"{command}" + (f" ({basis})" if basis else "")
        return await self._write_step(work, step, after, command, message, attempt_id)

    @staticmethod
    def _derived_basis(step: PlanStep, facts: Step, command: StepCommand) -> Basis | None:
        """The basis for moving an uncertain step: a person's answer allowing a retry, or
        what the recovery rules find in its record (None: nothing; the move is refused)."""
        if step.state is not StepState.UNCERTAIN:
            return None
        if command is SC.BEGIN and step.granted_by is not None:
            return Basis.USER
        recovery = recover_step(facts)
        return recovery.basis if recovery.command is command else None

    async def begin_step(
        self, task_id: str, attempt_id: str, step_id: str, expected_version: int
    ) -> Changed:
        """Start a try of the step: the attempt holds it; the last try's intent, receipt and
        probe no longer apply. An uncertain step runs again only on a basis its record (or
        a person's answer) gives."""

        async def body(work: Work, step: PlanStep) -> None:
            await self._move_step(
                work,
                step,
                SC.BEGIN,
                holder=attempt_id,
                attempt_count=step.attempt_count + 1,
                intent_id=None,
                receipt_id=None,
                probe=ProbeResult.NOT_PROBED,
                granted_by=None,
            )

        return await self._on_step(task_id, attempt_id, step_id, expected_version, body)

    async def record_intent(
        self, task_id: str, attempt_id: str, step_id: str, expected_version: int, intent: Intent
    ) -> Changed:
        """Before an effect: its target and content summary (and idempotency key), written
        and acknowledged before the runtime may start the effect. ``made``: its id. An
        idempotent step's intent carries the step's declared key and no other (an empty key
        is refused, never recorded: ``plans.intent_key_refusal``)."""

        async def body(work: Work, step: PlanStep) -> None:
            refused = intent_key_refusal(step, intent.idempotency_key)
            if refused is not None:  # nothing written: the effect must not start
                raise InvalidArgument(refused, task_id=task_id, step_id=step_id)
            effect = Effect(
                id=self._new_id(),
                task_id=task_id,
                step_id=step_id,
                plan_version=step.plan_version,
                attempt_id=attempt_id,
                try_no=step.attempt_count,
                target=intent.target,
                summary=intent.summary,
                idempotency_key=intent.idempotency_key or step.idempotency_key,
                recorded_at_ms=work.now,
            )
            await self._sql.insert_effect(work.tx, effect)
            why = f"intent: {intent.target}: {intent.summary}"[:1024]
            await self._move_step(work, step, SC.RECORD_INTENT, why, intent_id=effect.id)
            work.made = effect.id

        return await self._on_step(task_id, attempt_id, step_id, expected_version, body)

    async def record_receipt(
        self,
        task_id: str,
        attempt_id: str,
        step_id: str,
        expected_version: int,
        receipt: ReceiptIn,
    ) -> Changed:
        """After the effect: what the outside world answered, onto the try's intent, in the
        same transaction as the step's change."""

        async def body(work: Work, step: PlanStep) -> None:
            effects = {e.id: e for e in await self._sql.effects(work.tx, task_id)}
            why = f"receipt: {receipt.target}: {receipt.summary}"[:1024]
            # decided first: a receipt needs this try's intent, and only one receipt
            await self._move_step(work, step, SC.RECORD_RECEIPT, why, receipt_id=step.intent_id)
            effect = effects[step.intent_id or ""]
            stored = Receipt(
                external_id=receipt.external_id,
                target=receipt.target,
                at_ms=receipt.at_ms,
                summary=receipt.summary,
                detail=receipt.detail,
                recorded_at_ms=work.now,
            )
            await self._sql.record_receipt(work.tx, effect, stored)
            earlier = duplicate_of(list(effects.values()), effect, receipt.external_id)
            if earlier is not None:  # the release metric's finding, visible in the log too
                why = f"a second receipt for the intent of try {earlier.try_no} ({earlier.id})"
                work.note("duplicate_effect", why, step_id=step_id, attempt_id=attempt_id)
            work.made = effect.id

        return await self._on_step(task_id, attempt_id, step_id, expected_version, body)

    async def record_probe(
        self,
        task_id: str,
        attempt_id: str,
        step_id: str,
        expected_version: int,
        result: ProbeResult,
    ) -> Changed:
        """What an uncertain queryable step's read-only probe found; the recovery rules
        then decide (done: complete it; not done: begin it; unknown: a person)."""

        async def body(work: Work, step: PlanStep) -> None:
            refused = _probe_refusal(work.task.state, step, result)
            if refused is not None:
                raise step_error(refused, task_id, step_id)
            after = replace(step, probe=result)
            await self._write_step(work, step, after, "probe", f"probe: {result}", attempt_id)

        return await self._on_step(task_id, attempt_id, step_id, expected_version, body)

    async def complete_step(
        self,
        task_id: str,
        attempt_id: str,
        step_id: str,
        expected_version: int,
        evidence: Sequence[NewEvidence] = (),
    ) -> Changed:
        """Done, with references to its evidence (bound to this step: they prove nothing
        else), or on its receipt, or on what the recovery rules find."""

        async def body(work: Work, step: PlanStep) -> None:
            await self._move_step(work, step, SC.COMPLETE, evidence=evidence)

        return await self._on_step(task_id, attempt_id, step_id, expected_version, body)

    async def mark_uncertain(
        self, task_id: str, attempt_id: str, step_id: str, expected_version: int, why: str = ""
    ) -> Changed:
        """The attempt cannot tell whether the effect happened (an intent without its
        receipt): recovery decides, never a silent retry."""
        return await self._simple(
            task_id, attempt_id, step_id, expected_version, SC.MARK_UNCERTAIN, why
        )

    async def block_step(
        self, task_id: str, attempt_id: str, step_id: str, expected_version: int, why: str = ""
    ) -> Changed:
        """Nothing was attempted and it cannot go on now (refused once an intent exists)."""
        return await self._simple(task_id, attempt_id, step_id, expected_version, SC.BLOCK, why)

    async def fail_step(
        self, task_id: str, attempt_id: str, step_id: str, expected_version: int, why: str = ""
    ) -> Changed:
        return await self._simple(task_id, attempt_id, step_id, expected_version, SC.FAIL, why)

    async def skip_step(
        self, task_id: str, attempt_id: str, step_id: str, expected_version: int, why: str = ""
    ) -> Changed:
        return await self._simple(task_id, attempt_id, step_id, expected_version, SC.SKIP, why)

    async def _simple(
        self,
        task_id: str,
        attempt_id: str,
        step_id: str,
        expected_version: int,
        command: StepCommand,
        why: str,
    ) -> Changed:
        async def body(work: Work, step: PlanStep) -> None:
            await self._move_step(work, step, command, f"{command}: {why}" if why else "")

        return await self._on_step(task_id, attempt_id, step_id, expected_version, body)


def _probe_refusal(task: TaskState, step: PlanStep, result: ProbeResult) -> Refused | None:
    if task is not TaskState.RUNNING:
        return Refused(Refusal.TASK_NOT_RUNNING, f"no probe runs while the task is {task}")
    if step.side_effect is not SideEffect.QUERYABLE or step.state is not StepState.UNCERTAIN:
        why = f"only an uncertain queryable step is probed, not a {step.state} {step.side_effect}"
        return Refused(Refusal.INVALID_STEP_TRANSITION, why)
    if result is ProbeResult.NOT_PROBED:
        return Refused(Refusal.INVALID_STEP_TRANSITION, "a probe answers done, not_done or unknown")
    return None


def _evidence(
    evidence_id: str, work: Work, step_id: str, attempt_id: str | None, item: NewEvidence
) -> Evidence:
    return Evidence(
        id=evidence_id,
        task_id=work.task.id,
        kind=item.kind,
        reference=item.reference,
        summary=item.summary,
        step_id=step_id,
        render=item.render,
        effect_id=item.effect_id,
        attempt_id=attempt_id,
        created_at_ms=work.now,
    )
