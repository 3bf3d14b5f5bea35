"""The task's life outside its steps: create, enqueue, start an attempt (its run created in
the same transaction), pause, resume, cancel, clear a recovery. Each is one transaction of
the door (``base.py``); a person's command carries the task's expected version."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.service.transitions import DoorTx
from kernel import derived_keys
from kernel.errors import InvalidArgument, LongTaskExists
from longtasks.domain.actions import ActionRecord
from longtasks.domain.completion import Criterion
from longtasks.domain.model import (
    Attempt,
    Budget,
    CriterionRecord,
    Event,
    Lease,
    PlanVersion,
    Task,
)
from longtasks.domain.plans import first_plan, plan_refusal
from longtasks.domain.resolutions import Resolution, resolve_recovery
from longtasks.domain.rules import Moved, Refusal, Refused, TaskCommand, decide_task
from longtasks.domain.states import Basis, ProbeResult
from longtasks.service.base import DoorBase, Work
from longtasks.service.errors import task_error
from longtasks.service.inputs import Changed, NewCriterion, NewTask
from longtasks.service.usage import budget_ending, budget_words
from longtasks.store.rows import dumps
from longtasks.store.sql import TaskExists

C = TaskCommand
#: A check run inside ``start_attempt``'s transaction, on the locked task; it raises to refuse.
Admission = Callable[[DoorTx, Task], Awaitable[None]]


class TaskCommands(DoorBase):
    async def create(self, new: NewTask, actor: Actor) -> Changed:
        """A new task in ``planned`` with its first plan version, steps and criteria (shown
        and editable before anything runs; ``enqueue`` starts it)."""
        created = decide_task(None, C.CREATE)
        assert isinstance(created, Moved)
        task_id = new.task_id or self._new_id()
        refused = plan_refusal(new.steps)
        if refused is not None:
            raise task_error(refused, task_id)
        _check_criteria(new.criteria)
        now = self._clock()
        task = _new_task(task_id, new, actor, now, created)
        event = Event(
            C.CREATE.value,
            f"created with {len(new.steps)} steps and {len(new.criteria)} criteria",
            1,
            to_state=created.after.value,
            sequence=1,
            actor_type=actor.type.value,
            actor_id=actor.id,
            created_at_ms=now,
        )
        criteria = [
            CriterionRecord(
                Criterion(n.criterion_id, n.text, n.checker_kind, n.required, new.author, 1),
                position,
                n.checker_spec,
            )
            for position, n in enumerate(new.criteria, 1)
        ]
        # the owner's handle lock serializes its creates, so each takes the next number
        async with self._transitions.transaction([handle_lock(new.owner_id)]) as tx:
            task = replace(task, handle=await self._sql.next_handle(tx, new.owner_id))
            try:
                await self._sql.insert_task(
                    tx, task, dumps(list(new.constraints)), dumps(list(new.sources))
                )
            except TaskExists:
                raise LongTaskExists(
                    f"long task {task_id} exists already", task_id=task_id
                ) from None
            await self._sql.insert_plan(
                tx, PlanVersion(task_id, 1, new.author, new.reason, actor.id, now)
            )
            await self._sql.insert_steps(tx, first_plan(task_id, new.steps, now))
            await self._sql.insert_criteria(tx, task_id, 1, criteria)
            await self._sql.append(tx, task_id, [event])
        return Changed(task)

    async def enqueue(self, task_id: str, expected_version: int, actor: Actor) -> Changed:
        """Start a planned task: it waits in ``queued`` for an attempt."""

        async def change(work: Work) -> None:
            self._move(work, C.ENQUEUE)

        return await self._act(task_id, actor, change, expected_version=expected_version)

    async def start_attempt(
        self,
        task_id: str,
        actor: Actor,
        expected_version: int | None = None,
        admit: Admission | None = None,
    ) -> Changed:
        """A queued task's next attempt: its run is created through the coordinator's door
        in this transaction (one try: retrying is the long task's recovery, never the run's
        retry policy), linked, and the attempt takes the lease. A task whose budget is used
        up goes to ``partial`` (``failed`` with no useful result) instead, saying so.
        ``admit``: the scheduler's check, in this transaction right before the attempt
        opens (the owner's concurrency cap); it raises to refuse, and nothing is written."""

        async def change(work: Work) -> None:
            refused = decide_task(work.task.state, C.ATTEMPT_STARTED)
            if isinstance(refused, Refused):
                raise task_error(refused, task_id)
            attempts = await self._sql.attempts(work.tx, task_id)
            still = [a.id for a in attempts if a.ended_at_ms is None]
            if still:
                why = f"attempt {still[0]} has not ended: its run may still be working"
                raise task_error(Refused(Refusal.ATTEMPT_OPEN, why), task_id)
            exhausted = work.task.budget.exhausted(work.now)
            if exhausted is not None:
                steps = await self._steps(work)
                criteria = await self._sql.criteria(work.tx, task_id, work.task.plan_version)
                ending = budget_ending(steps, criteria)
                self._move(work, ending, budget_words(exhausted, steps, criteria))
                return
            if admit is not None:
                await admit(work.tx, work.task)
            await self._open_attempt(work, len(attempts) + 1)

        return await self._act(task_id, actor, change, expected_version=expected_version)

    async def _open_attempt(self, work: Work, attempt_no: int) -> None:
        task = work.task
        attempt_id = self._new_id()
        spec = c.RunSpec(
            project_id=task.project_id,
            owner_id=task.owner_id,
            task_id=task.id,
            task_revision=task.plan_version,
            created_by=work.actor,
            agent_id=task.agent_id,
            trigger_type="long_task",
            trigger_id=task.id,
            # Reserved (kernel/derived_keys.py): no caller can create this run first.
            idempotency_key=derived_keys.long_task_attempt(task.id, attempt_no),
            max_attempts=1,
            spec={
                "long_task": {
                    "id": task.id,
                    "attempt_id": attempt_id,
                    "attempt_no": attempt_no,
                    "plan_version": task.plan_version,
                }
            },
        )
        result = await self._transitions.create_in(work.tx, spec)
        work.results.append(result)
        run_id = result.run.id
        await self._sql.insert_attempt(
            work.tx, Attempt(attempt_id, task.id, attempt_no, run_id, task.plan_version, work.now)
        )
        self._move(work, C.ATTEMPT_STARTED, f"attempt {attempt_no} started: run {run_id}")
        work.events[-1] = replace(work.events[-1], attempt_id=attempt_id)
        budget = replace(work.task.budget, attempts_used=work.task.budget.attempts_used + 1)
        lease = Lease(attempt_id, run_id, work.now + self._lease_ms)
        work.task = replace(work.task, lease=lease, budget=budget)
        work.made, work.run_id = attempt_id, run_id

    async def pause(
        self,
        task_id: str,
        expected_version: int,
        actor: Actor,
        note: str = "",
        action: ActionRecord | None = None,
    ) -> Changed:
        """Paused by a person: nothing open, never continues by itself. A live attempt's run
        is cancelled in the same transaction; its running step becomes uncertain once the
        run is known to have ended (``attempt_ended``)."""
        return await self._stop(task_id, expected_version, actor, C.PAUSE, note, action)

    async def cancel(
        self,
        task_id: str,
        expected_version: int,
        actor: Actor,
        note: str = "",
        action: ActionRecord | None = None,
    ) -> Changed:
        """Cancelled by a person, for good: no continuation ever starts it again. Its open
        decisions expire; a live attempt's run is cancelled in the same transaction."""
        return await self._stop(task_id, expected_version, actor, C.CANCEL, note, action)

    async def _stop(
        self,
        task_id: str,
        expected_version: int,
        actor: Actor,
        command: C,
        note: str,
        action: ActionRecord | None,
    ) -> Changed:
        async def change(work: Work) -> None:
            lease = work.task.lease
            why = f"{command.value} by {actor.id}" + (f": {note}" if note else "")
            self._move(work, command, why)
            if lease is not None:
                cancel = c.RequestCancel(lease.run_id, actor, reason=f"long_task_{command}")
                work.results.append(await self._transitions.execute_in(work.tx, cancel))
            if command is C.CANCEL:
                await self._expire_decisions(work, None, "the task was cancelled")

        return await self._act(
            task_id, actor, change, expected_version=expected_version, action=action
        )

    async def resume(
        self,
        task_id: str,
        expected_version: int,
        actor: Actor,
        action: ActionRecord | None = None,
    ) -> Changed:
        async def change(work: Work) -> None:
            self._move(work, C.RESUME, f"resumed by {actor.id}")

        return await self._act(
            task_id, actor, change, expected_version=expected_version, action=action
        )

    async def clear_recovery(
        self,
        task_id: str,
        expected_version: int,
        actor: Actor,
        note: str = "",
        resolution: Resolution = Resolution.GO_ON,
    ) -> Changed:
        """A person checked an interrupted task (``recovery_required``): it goes on, queued.
        ``resolution`` (``domain/resolutions.py``): ``skip`` the stopped step (its work is
        done, on their word: no evidence is recorded) or ``retry`` it (back to pending)."""

        async def change(work: Work) -> None:
            self._move(work, C.RECOVERY_CLEARED, f"checked by {actor.id}: {note}".strip(": "))
            steps = await self._steps(work)
            evidence = await self._evidence(work)
            facts = [s.rules(self._bound(evidence, s.step_id)) for s in steps]
            resolved = resolve_recovery(facts, resolution)
            if isinstance(resolved, Refused):
                raise task_error(resolved, task_id)
            work.note("recovery_resolved", f"{resolution} by {actor.id}: {resolved.why}")
            if resolved.command is None or resolved.step_index is None:
                return
            step = next(s for s in steps if s.position == resolved.step_index)
            moved = self._decide_step(
                work, step, facts[steps.index(step)], resolved.command, Basis.USER
            )
            after = replace(step, state=moved.after, basis=Basis.USER, granted_by=None)
            if moved.fresh_try:  # the failed try's record no longer applies
                after = replace(
                    after, intent_id=None, receipt_id=None, probe=ProbeResult.NOT_PROBED
                )
            why = f"{resolved.command} on {actor.id}'s word: {resolved.why}"
            await self._write_step(work, step, after, resolved.command, why)

        return await self._act(task_id, actor, change, expected_version=expected_version)


def handle_lock(owner_id: str) -> str:
    """The advisory lock serializing one owner's creates on PostgreSQL, so each takes the
    next handle (SQLite's single writer already serializes them)."""
    return f"long_task_handles:{owner_id}"


def _check_criteria(criteria: tuple[NewCriterion, ...]) -> None:
    ids = [n.criterion_id for n in criteria]
    if len(set(ids)) != len(ids) or not all(i.strip() for i in ids):
        raise InvalidArgument("every criterion needs its own non-empty id")


def _new_task(task_id: str, new: NewTask, actor: Actor, now: int, created: Moved) -> Task:
    deadline = now + new.lifetime_ms if new.lifetime_ms is not None else None
    return Task(
        id=task_id,
        project_id=new.project_id,
        owner_id=new.owner_id,
        goal=new.goal,
        state=created.after,
        state_version=1,
        plan_version=1,
        budget=Budget(new.max_attempts, max_tokens=new.max_tokens, deadline_ms=deadline),
        agent_id=new.agent_id,
        state_reason=new.reason,
        max_verify_interruptions=new.max_verify_interruptions,
        max_corrections=new.max_corrections,
        event_sequence=1,
        created_by=actor.id,
        created_at_ms=now,
        updated_at_ms=now,
        source_ref=new.source_ref,
    )
