"""The shape of every long-task write (docs/long-tasks.md "Store and door"):

1. one transaction opened through the coordinator's door (``Transitions.transaction``), so a
   run an attempt needs is created (``Transitions.create_in``) or cancelled
   (``Transitions.execute_in``) in the same commit;
2. the task row locked first (PostgreSQL ``FOR UPDATE``; SQLite's single writer), then read;
3. the caller's expected version compared with the task's ``state_version`` (a step action:
   with the step's ``version``), and a step action's attempt checked against the lease;
4. the change decided by the pure rules (``longtasks.domain``), a refusal raised as a stable
   error before anything is written;
5. the rows written, every update compare-and-set (the task on ``state_version``, a step on
   its ``version``), the task's version moved on, its events appended;
6. commit; then the runs' results are published.

Any raise anywhere rolls all of it back: a refused or stale command changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service.transitions import DoorTx, Result, Transitions
from kernel.errors import LongTaskLeaseNotHeld, LongTaskNotFound, LongTaskVersionConflict
from kernel.ids import now_ms, uuid7
from longtasks.domain.actions import ActionRecord
from longtasks.domain.model import Attempt, Decision, Event, Evidence, PlanStep, Step, Task
from longtasks.domain.rules import (
    Continued,
    Refused,
    StepCommand,
    StepMoved,
    TaskCommand,
    decide_step,
    decide_task,
)
from longtasks.domain.states import AttemptOutcome, Basis, DecisionKind, DecisionState, StepState
from longtasks.service.errors import step_error, task_error
from longtasks.service.inputs import Changed
from longtasks.service.notify import notice_facts, notice_runs, show_on_runs, write_notice
from longtasks.store.rows import dumps
from longtasks.store.sql import LongTaskSql, Stale

#: How long a lease lasts past the holder's last action or renewal.
LEASE_MS = 10 * 60 * 1000
SYSTEM = Actor(ActorType.SYSTEM, "long-tasks")


@dataclass
class Work:
    """One transaction of the door: the task as locked (``before``), the task as it will be
    written (``task``), and what the change collects."""

    tx: DoorTx
    before: Task
    task: Task
    now: int
    actor: Actor
    events: list[Event] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    step: PlanStep | None = None
    decision: Decision | None = None
    made: str | None = None
    run_id: str | None = None
    notes: list[str] = field(default_factory=list)
    # what the notices outbox reads (longtasks/domain/notices.py): the decisions this change
    # opened, the lease holder it buried, and the kind of notice it wrote
    asked: list[Decision] = field(default_factory=list)
    interrupted: str | None = None
    noticed: str | None = None

    def note(
        self,
        type: str,
        message: str,
        *,
        step_id: str | None = None,
        attempt_id: str | None = None,
        decision_id: str | None = None,
        moved: tuple[str, str] | None = None,
    ) -> None:
        self.events.append(
            Event(
                type,
                message,
                self.task.plan_version,
                step_id,
                attempt_id,
                decision_id,
                moved[0] if moved else None,
                moved[1] if moved else None,
            )
        )


Change = Callable[[Work], Awaitable[None]]


class DoorBase:
    """The transaction shape every door method shares (the methods are in ``tasks.py``,
    ``revisions.py``, ``steps.py``, ``asks.py`` and ``endings.py``; ``door.py`` puts them
    together)."""

    def __init__(
        self,
        transitions: Transitions,
        sql: LongTaskSql,
        clock: Callable[[], int] = now_ms,
        new_id: Callable[[], str] = uuid7,
        lease_ms: int = LEASE_MS,
    ) -> None:
        self._transitions = transitions
        self._sql = sql
        self._clock = clock
        self._new_id = new_id
        self._lease_ms = lease_ms
        self._notice_listeners: tuple[Callable[[str], None], ...] = ()

    async def _act(
        self,
        task_id: str,
        actor: Actor,
        change: Change,
        *,
        expected_version: int | None = None,
        holder: str | None = None,
        action: ActionRecord | None = None,
    ) -> Changed:
        """Run ``change`` on the locked task in one transaction. ``expected_version``: the
        caller's etag (None: a system action on whatever is current); ``holder``: the
        attempt a step action comes from, which must hold the lease (it is renewed);
        ``action``: a person's action of the one action contract, kept by its one-time id
        with the version the change made (``ActionTaken`` if the id was kept already: the
        change rolls back). A change that notes no event writes nothing."""
        now = self._clock()
        async with self._transitions.transaction([]) as tx:
            task = await self._sql.lock_task(tx, task_id)
            if task is None:
                raise LongTaskNotFound(f"long task {task_id} does not exist", task_id=task_id)
            if expected_version is not None and expected_version != task.state_version:
                raise _conflict(task, f"not {expected_version}")
            work = Work(tx, task, task, now, actor)
            if holder is not None:
                work.task = self._held(task, holder, now)
            try:
                await change(work)
                if work.events:
                    await self._commit(work)
                    if action is not None:
                        made = replace(
                            action, task_version=work.task.state_version, created_at_ms=now
                        )
                        await self._sql.insert_action(work.tx, made)
            except Stale:
                raise _conflict(task, "changed inside its own transaction") from None
        self._transitions.published(work.results)
        if work.noticed is not None:
            self._noticed(work.noticed)
        return Changed(
            work.task, work.step, work.decision, work.made, work.run_id, tuple(work.notes)
        )

    def on_notice(self, listener: Callable[[str], None]) -> None:
        """Call ``listener`` with a notice's kind once the change that wrote it committed
        (the metric ``truerun_long_task_notices_total``)."""
        self._notice_listeners = (*self._notice_listeners, listener)

    def _noticed(self, kind: str) -> None:
        for listener in self._notice_listeners:
            listener(kind)

    def _held(self, task: Task, attempt_id: str, now: int) -> Task:
        """The task with its lease renewed, if ``attempt_id`` holds it; else refused."""
        lease = task.lease
        if lease is None or lease.attempt_id != attempt_id or now >= lease.expires_at_ms:
            holder = "nobody" if lease is None else f"attempt {lease.attempt_id}"
            if lease is not None and now >= lease.expires_at_ms:
                holder += " (expired)"
            raise LongTaskLeaseNotHeld(
                f"attempt {attempt_id} does not hold long task {task.id}'s lease ({holder} does)",
                task_id=task.id,
                attempt_id=attempt_id,
            )
        return replace(task, lease=replace(lease, expires_at_ms=now + self._lease_ms))

    async def _commit(self, work: Work) -> None:
        before = work.before
        sequence = before.event_sequence
        events = []
        for event in work.events:
            sequence += 1
            events.append(
                replace(
                    event,
                    sequence=sequence,
                    actor_type=work.actor.type.value,
                    actor_id=work.actor.id,
                    created_at_ms=work.now,
                )
            )
        task = replace(
            work.task,
            state_version=before.state_version + 1,
            updated_at_ms=work.now,
            event_sequence=sequence,
        )
        await self._sql.update_task(work.tx, task, before.state_version)
        await self._sql.append(work.tx, task.id, events)
        work.task = task
        notice = await write_notice(
            self._sql, work.tx, notice_facts(work), task, work.now, self._new_id
        )
        if notice is not None:
            work.noticed = notice.kind
            runs = notice_runs(work)
            work.results += await show_on_runs(self._transitions, work.tx, notice, runs, SYSTEM)

    # -- the pure rules, applied --------------------------------------------------------

    def _move(self, work: Work, command: TaskCommand, why: str = "") -> None:
        """The task command by the transition table; refused -> raised, nothing written.
        Leaving the states that hold a lease releases it."""
        before = work.task.state
        outcome = decide_task(before, command)
        if isinstance(outcome, Refused):
            raise task_error(outcome, work.task.id)
        after = outcome.state if isinstance(outcome, Continued) else outcome.after
        work.task = replace(
            work.task,
            state=after,
            lease=work.task.lease if after.leased else None,
            state_reason=why[:1024],
            finished_at_ms=work.now if after.terminal else None,
        )
        work.note(command.value, why or f"{before} -> {after}", moved=(before, after))

    async def _expire_decisions(self, work: Work, attempt_id: str | None, why: str) -> None:
        """Close the open decisions (of ``attempt_id`` only, when given) as expired."""
        for decision in await self._sql.decisions(work.tx, work.task.id):
            if decision.state is not DecisionState.OPEN:
                continue
            if attempt_id is not None and decision.attempt_id != attempt_id:
                continue
            expired = replace(
                decision, state=DecisionState.EXPIRED, note=why, answered_at_ms=work.now
            )
            await self._sql.close_decision(work.tx, expired)
            work.note("decision_expired", why, decision_id=decision.id)

    async def _ask(
        self,
        work: Work,
        kind: DecisionKind,
        question: str,
        options: Sequence[str],
        material: str,
        attempt_id: str | None = None,
        subject: str = "",
        repeat: int = 1,
        step_id: str | None = None,
    ) -> Decision:
        decision = Decision(
            id=self._new_id(),
            task_id=work.task.id,
            kind=kind,
            state=DecisionState.OPEN,
            question=question,
            plan_version=work.task.plan_version,
            task_version=work.before.state_version,
            created_at_ms=work.now,
            options=dumps(list(options)),
            material=material,
            subject=subject,
            step_id=step_id,
            attempt_id=attempt_id,
            repeat_count=repeat,
        )
        await self._sql.insert_decision(work.tx, decision)
        work.asked.append(decision)
        work.note(f"{kind}_asked", question[:1024], decision_id=decision.id, step_id=step_id)
        return decision

    async def _end_attempt(
        self, work: Work, attempt: Attempt, outcome: AttemptOutcome, why: str
    ) -> None:
        """Close an attempt's record (its run may still be finishing; it holds no step)."""
        ended = replace(attempt, ended_at_ms=work.now, outcome=outcome, reason=why)
        await self._sql.end_attempt(work.tx, ended)
        work.note(
            "attempt_ended",
            f"attempt {attempt.attempt_no}: {outcome}: {why}",
            attempt_id=attempt.id,
        )

    async def _attempt(self, work: Work, attempt_id: str) -> Attempt:
        for attempt in await self._sql.attempts(work.tx, work.task.id):
            if attempt.id == attempt_id:
                return attempt
        raise LongTaskNotFound(
            f"long task {work.task.id} has no attempt {attempt_id}",
            task_id=work.task.id,
            attempt_id=attempt_id,
        )

    async def _steps(self, work: Work) -> list[PlanStep]:
        return await self._sql.steps(work.tx, work.task.id, work.task.plan_version)

    async def _evidence(self, work: Work) -> list[Evidence]:
        return await self._sql.evidence(work.tx, work.task.id)

    @staticmethod
    def _bound(evidence: Sequence[Evidence], step_id: str) -> tuple[str, ...]:
        return tuple(e.id for e in evidence if e.step_id == step_id)

    async def _rules(self, work: Work, step: PlanStep) -> Step:
        return step.rules(self._bound(await self._evidence(work), step.step_id))

    async def _step(self, work: Work, step_id: str, expected_version: int | None) -> PlanStep:
        """A step of the task's current plan version, at the version the caller sent."""
        for step in await self._steps(work):
            if step.step_id != step_id:
                continue
            if expected_version is not None and expected_version != step.version:
                raise LongTaskVersionConflict(
                    f"step {step_id} is at version {step.version}, not {expected_version}",
                    task_id=work.task.id,
                    step_id=step_id,
                    current_version=str(step.version),
                )
            return step
        raise LongTaskNotFound(
            f"step {step_id} is not in plan version {work.task.plan_version} of {work.task.id}",
            task_id=work.task.id,
            step_id=step_id,
        )

    def _decide_step(
        self,
        work: Work,
        step: PlanStep,
        facts: Step,
        command: StepCommand,
        basis: Basis | None = None,
        evidence: tuple[str, ...] = (),
    ) -> StepMoved:
        moved = decide_step(work.task.state, facts, command, basis=basis, evidence=evidence)
        if isinstance(moved, Refused):
            raise step_error(moved, work.task.id, step.step_id)
        return moved

    async def _write_step(
        self,
        work: Work,
        before: PlanStep,
        after: PlanStep,
        command: StepCommand | str,
        why: str,
        attempt_id: str | None = None,
    ) -> PlanStep:
        """``after`` over ``before`` (compare-and-set on the step's version), noted."""
        holder = after.holder if after.state is StepState.RUNNING else None
        written = replace(after, holder=holder, version=before.version + 1, updated_at_ms=work.now)
        await self._sql.update_step(work.tx, written, before.version)
        moved = (before.state, written.state) if before.state is not written.state else None
        work.note(
            f"step_{command}", why, step_id=before.step_id, attempt_id=attempt_id, moved=moved
        )
        work.step = written
        return written


def _conflict(task: Task, what: str) -> LongTaskVersionConflict:
    return LongTaskVersionConflict(
        f"long task {task.id} is at version {task.state_version}, {what}; read it again",
        task_id=task.id,
        current_version=str(task.state_version),
    )
