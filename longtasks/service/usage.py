"""Token usage, reported by the attempt's runtime (``ReportUsage``; seed C "预算、并发与配额":
"任一上限耗尽时进入 partial ... 并列出已完成与未完成的验收条件。绝不静默继续").

One transaction of the door, from the lease holder only. A usage report carries an id the
runtime chose; the id is the primary key of its ``long_task_usage`` row, so a repeated
report (a retry after a lost answer) inserts nothing and changes nothing: counted once,
kept as the record of what was spent by which attempt. A new report adds its tokens to
``long_tasks.tokens_used`` in the same transaction. That alone is no state change: the
task's version does not move and no event is noted (a lease renewal is none either), so a
person's etag stays good while the attempt spends.

When the sum reaches ``max_tokens`` the attempt must not go on: the task moves to
``partial`` (``failed`` when no step completed and no criterion passed: ``boundary.py``)
in the same transaction with the reason and the acceptance criteria met and
unmet, in words; the lease is released, the attempt's run cancelled through the coordinator's
door (as ``pause`` and ``cancel`` do) and its open decisions expire. The watcher then ends
the attempt once the run has ended (a running step becomes ``uncertain``); both are
terminal, so no further attempt ever starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coordinator.domain import commands as c
from kernel.errors import InvalidArgument
from longtasks.domain.boundary import Boundary, boundary_command
from longtasks.domain.model import CriterionRecord, PlanStep
from longtasks.domain.rules import TaskCommand
from longtasks.domain.states import CriterionResult, StepState
from longtasks.service.base import SYSTEM, DoorBase, Work
from longtasks.service.inputs import Changed
from longtasks.service.steps import attempt_actor
from longtasks.store.sql import Stale

#: The most tokens one report may carry (a report is a delta; far above any model call).
MAX_TOKENS_PER_REPORT = 1_000_000_000
#: What an event's message and a task's reason hold at most.
_WORDS = 1024


class Usage(DoorBase):
    async def report_usage(
        self, task_id: str, attempt_id: str, usage_id: str, tokens: int
    ) -> Changed:
        """Add ``tokens`` the attempt spent (``usage_id``: counted once however often it is
        reported). The answer's ``task`` carries the new sum; its notes say when the id was
        counted already. The budget used up -> ``partial``, the run cancelled."""
        if not 0 < tokens <= MAX_TOKENS_PER_REPORT:
            raise InvalidArgument(f"tokens must be between 1 and {MAX_TOKENS_PER_REPORT}")
        if not usage_id:
            raise InvalidArgument("usage_id is required")

        async def change(work: Work) -> None:
            counted = await self._sql.record_usage(
                work.tx, task_id, usage_id, attempt_id, tokens, work.now
            )
            if not counted:
                work.notes.append(f"usage {usage_id} was counted already")
                work.task = work.before  # nothing written: not even the lease renewed
                return
            lease = work.task.lease
            assert lease is not None  # _held renewed it
            total = await self._sql.add_tokens(
                work.tx, task_id, work.before.state_version, tokens, lease.expires_at_ms
            )
            if total is None:
                raise Stale("long_tasks")
            work.task = replace(work.task, budget=replace(work.task.budget, tokens_used=total))
            why = work.task.budget.tokens_exhausted()
            if why is not None:
                await self._stop_for_budget(work, why)

        return await self._act(task_id, attempt_actor(attempt_id), change, holder=attempt_id)

    async def _stop_for_budget(self, work: Work, why: str) -> None:
        """``partial`` (or ``failed`` when nothing useful was produced: ``boundary.py``) with
        the reason and the criteria in words; the live attempt's run cancelled in this
        transaction, its decisions expired."""
        lease = work.task.lease
        steps = await self._steps(work)
        records = await self._sql.criteria(work.tx, work.task.id, work.task.plan_version)
        self._move(work, budget_ending(steps, records), budget_words(why, steps, records))
        if lease is not None:
            cancel = c.RequestCancel(lease.run_id, SYSTEM, reason="long_task_budget_exhausted")
            work.results.append(await self._transitions.execute_in(work.tx, cancel))
        await self._expire_decisions(work, None, "the task's budget is used up")


def budget_ending(steps: Sequence[PlanStep], records: Sequence[CriterionRecord]) -> TaskCommand:
    """A used-up budget's command: ``budget_exhausted`` (partial) or ``fail``."""
    return boundary_command(Boundary.BUDGET, (s.state for s in steps), (r.result for r in records))


def budget_words(why: str, steps: Sequence[PlanStep], records: Sequence[CriterionRecord]) -> str:
    """The reason a budget stopped the task, with what was done and which acceptance
    criteria are met and unmet (each unmet one with its result), at most 1024 characters."""
    done = sum(1 for s in steps if s.state in (StepState.COMPLETED, StepState.SKIPPED))
    met = [r.criterion.id for r in records if r.result is CriterionResult.PASSED]
    unmet = [
        f"{r.criterion.id} ({r.result}{'' if r.criterion.required else ', optional'})"
        for r in records
        if r.result is not CriterionResult.PASSED
    ]
    words = (
        f"stopped because the task's budget ran out: {why}; steps done: {done} of "
        f"{len(steps)}; criteria met: {', '.join(met) or 'none'}; "
        f"criteria unmet: {', '.join(unmet) or 'none'}"
    )
    return words if len(words) <= _WORDS else words[: _WORDS - 3] + "..."
