"""The end of an attempt, decided by the recovery rules (seed C "安全恢复"): once the run of
an attempt is known to have ended (terminal or lost: the run machinery decides that), or at
process start for every holder that is not alive, the door

1. turns every running step the dead attempt held into ``uncertain`` (never ``pending``:
   it may have had its effect; ``recovery.held_by_the_dead``);
2. closes the attempt's record and expires the approvals scoped to it;
3. if that attempt held the lease, decides where the task goes: an interrupted verification
   runs again until it was interrupted too often (``after_verification_interrupted``);
   otherwise ``resume_point`` completes the steps whose effect is proven, stops at the
   first one that is not, and names ``attempt_ended_resumable`` (queued),
   ``attempt_ended_ask_user`` (waiting_for_user, with the step's intent record as the
   question's material) or ``attempt_ended_needs_review`` (recovery_required).

Lease renewal (``renew_lease``) is the one write here that is no state change: it moves the
lease's expiry only, bumps no version and notes no event.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from coordinator.domain.model import Actor
from kernel.errors import LongTaskLeaseNotHeld
from longtasks.domain.decisions import EffectAnswer
from longtasks.domain.model import Attempt, Evidence, PlanStep
from longtasks.domain.recovery import (
    RecoveryAction,
    after_verification_interrupted,
    held_by_the_dead,
    resume_point,
)
from longtasks.domain.rules import StepCommand, TaskCommand
from longtasks.domain.states import AttemptOutcome, DecisionKind, StepState, TaskState
from longtasks.service.base import SYSTEM, DoorBase, Work
from longtasks.service.inputs import Changed
from longtasks.store.rows import dumps


class Endings(DoorBase):
    async def attempt_ended(
        self, task_id: str, attempt_id: str, reason: str, actor: Actor = SYSTEM
    ) -> Changed:
        """The attempt's run ended (or was lost) without the task settling. Idempotent: an
        attempt already ended changes nothing (and the answer has no notes; ending it notes
        ``attempt <id> ended``, so a watcher knows it was this call that ended it)."""

        async def change(work: Work) -> None:
            attempt = await self._attempt(work, attempt_id)
            if attempt.ended_at_ms is None:
                await self._bury(work, {attempt_id}, reason)
                work.notes.append(f"attempt {attempt_id} ended")

        return await self._act(task_id, actor, change)

    async def held_by_the_dead(
        self,
        live_attempts: Collection[str],
        reason: str = "its holder is not alive at process start",
        actor: Actor = SYSTEM,
        seen: Collection[str] | None = None,
    ) -> list[Changed]:
        """At process start: every attempt not in ``live_attempts`` that has not ended, and
        every running step such an attempt holds, is dead; each task is settled as
        ``attempt_ended`` settles it, one transaction per task. The tasks changed.

        ``seen``: the attempts the caller looked at when it named the live ones (None: all
        of them, a single process at its start). An attempt it did not see, started by
        another replica since, is alive: only an attempt seen not alive, or one whose
        record has ended, is ever buried."""
        live = frozenset(live_attempts)
        looked = None if seen is None else frozenset(seen)
        changed = []
        buried: set[str] = set()
        for task_id in await self._sql.tasks_with_holders():

            async def change(work: Work) -> None:
                attempts = await self._sql.attempts(work.tx, work.task.id)
                steps = await self._steps(work)
                ended = {a.id for a in attempts if a.ended_at_ms is not None}

                def gone(attempt_id: str) -> bool:
                    if attempt_id in live:
                        return False
                    return looked is None or attempt_id in looked or attempt_id in ended

                dead = {a.id for a in attempts if a.ended_at_ms is None and gone(a.id)}
                dead |= {
                    s.holder
                    for s in steps
                    if s.state is StepState.RUNNING and s.holder and gone(s.holder)
                }
                if dead:
                    await self._bury(work, dead, reason)
                    buried.add(work.task.id)

            after = await self._act(task_id, actor, change)
            if task_id in buried:
                changed.append(after)
        return changed

    async def renew_lease(self, task_id: str, attempt_id: str) -> int:
        """Keep the lease of the attempt holding it (its runtime is alive but between step
        actions): the new expiry. Refused if it does not hold it, or it expired."""
        now = self._clock()
        expires = now + self._lease_ms
        async with self._transitions.transaction([]) as tx:
            if not await self._sql.renew_lease(tx, task_id, attempt_id, now, expires):
                raise LongTaskLeaseNotHeld(
                    f"attempt {attempt_id} does not hold long task {task_id}'s lease",
                    task_id=task_id,
                    attempt_id=attempt_id,
                )
        return expires

    async def _bury(self, work: Work, dead: set[str], reason: str) -> None:
        steps = await self._steps(work)
        evidence = await self._evidence(work)
        live = frozenset({s.holder for s in steps if s.holder} - dead)
        facts = [s.rules(self._bound(evidence, s.step_id)) for s in steps]
        by_position = {s.position: s for s in steps}
        for position, move in held_by_the_dead(work.task.state, facts, live):
            step = by_position[position]
            after = replace(step, state=move.after, basis=move.basis)
            why = f"its holder {step.holder} is gone: uncertain, never pending"
            by_position[position] = await self._write_step(
                work, step, after, StepCommand.MARK_UNCERTAIN, why, step.holder
            )
        attempts: list[Attempt] = await self._sql.attempts(work.tx, work.task.id)
        for attempt in attempts:
            if attempt.id in dead and attempt.ended_at_ms is None:
                await self._end_attempt(work, attempt, AttemptOutcome.RUN_ENDED, reason)
                await self._expire_decisions(work, attempt.id, "its attempt ended")
        lease = work.task.lease
        if lease is not None and lease.attempt_id in dead:
            work.interrupted = lease.attempt_id  # one interruption notice (notify.py)
            current = [by_position[p] for p in sorted(by_position)]
            await self._recover(work, current, evidence, reason)

    async def _recover(
        self, work: Work, steps: Sequence[PlanStep], evidence: Sequence[Evidence], reason: str
    ) -> None:
        task = work.task
        if task.state is TaskState.VERIFYING:
            count = task.verify_interruptions + 1
            work.task = replace(task, verify_interruptions=count)
            command = after_verification_interrupted(count, task.max_verify_interruptions)
            why = f"{reason}: verification interrupted ({count} of at most "
            why += f"{task.max_verify_interruptions}); it runs again in full"
            self._move(work, command, why)
            return
        resume = resume_point([s.rules(self._bound(evidence, s.step_id)) for s in steps])
        by_position = {s.position: s for s in steps}
        for recovery in resume.recoveries:
            if recovery.action is not RecoveryAction.SKIP:
                continue
            step = by_position[recovery.step_index]
            facts = step.rules(self._bound(evidence, step.step_id))
            basis = recovery.basis
            moved = self._decide_step(work, step, facts, StepCommand.COMPLETE, basis)
            after = replace(step, state=moved.after, basis=basis)
            why = f"complete: {recovery.why}"
            by_position[step.position] = await self._write_step(
                work, step, after, StepCommand.COMPLETE, why
            )
        if resume.command is TaskCommand.ATTEMPT_ENDED_ASK_USER:
            assert resume.step_index is not None
            await self._ask_about(work, by_position[resume.step_index])
        self._move(work, resume.command, f"{reason}: {resume.why}")

    async def _ask_about(self, work: Work, step: PlanStep) -> None:
        """An uncertain effect only a person can judge: the question carries the intent
        record (target, time, content summary, idempotency key) as its material."""
        effects = {e.id: e for e in await self._sql.effects(work.tx, work.task.id)}
        effect = effects.get(step.intent_id or "")
        material: dict[str, object] = {
            "step_id": step.step_id,
            "title": step.title,
            "class": step.side_effect.value,
        }
        if effect is not None:
            material |= {
                "target": effect.target,
                "summary": effect.summary,
                "intent_recorded_at_ms": effect.recorded_at_ms,
                "idempotency_key": effect.idempotency_key,
                "attempt_id": effect.attempt_id,
            }
        question = (
            f"Step {step.position} ({step.title!r}) may have taken effect before its attempt "
            "stopped. Did it? (done, retry, skip or fail)"
        )
        work.decision = await self._ask(
            work,
            DecisionKind.EFFECT,
            question,
            list(EffectAnswer),
            dumps(material),
            step_id=step.step_id,
        )
