"""The notices outbox, written by the door's commit (``base.py``): the pure rule
(``longtasks.domain.notices.notice_for``) reads what the change did, and the notice it
raises is inserted in the same transaction, with one pending delivery per webhook the
task's owner registered in its project. The dedupe key is unique: when a second writer
meets the same fact (process start and the watcher both burying one attempt), its insert
is a no-op and it writes no deliveries either.

The notice is also shown where a person watching a run is (issue #14: "shown where the
person is ... never only inside the attempt"): on the task's source run (the run it was
promoted from) and on the run of the attempt that held the lease when the change was made,
as a ``long_task.notice`` run event appended through the coordinator's door (``NoteRun``)
in the same transaction. Its payload is allow-listed: kind, title, text, long_task_id,
handle, command."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.service.transitions import DoorTx, Result, Transitions
from longtasks.domain.actions import format_handle
from longtasks.domain.model import Task
from longtasks.domain.notices import ChangeFacts, notice_for
from longtasks.store.notice_sql import PENDING, Delivery, NoticeStatements, StoredNotice

if TYPE_CHECKING:
    from longtasks.service.base import Work


def notice_facts(work: Work) -> ChangeFacts:
    """What the committed change did, as the notice rule reads it."""
    task = work.task
    return ChangeFacts(
        task_id=task.id,
        handle=task.handle,
        goal=task.goal,
        before=work.before.state,
        after=task.state,
        plan_version=task.plan_version,
        version=task.state_version,
        reason=task.state_reason,
        interrupted_attempt=work.interrupted,
        asked=tuple(work.asked),
    )


def notice_runs(work: Work) -> list[str]:
    """The runs a change's notice is shown on: the task's source run, then the run of the
    attempt that held the lease before the change (an interruption's: the one that ended)
    and after it; each once."""
    task, before = work.task, work.before
    found = (
        task.source_run_id,
        before.lease.run_id if before.lease else None,
        task.lease.run_id if task.lease else None,
    )
    return list(dict.fromkeys(run for run in found if run))


async def show_on_runs(
    transitions: Transitions, tx: DoorTx, notice: StoredNotice, runs: Iterable[str], actor: Actor
) -> list[Result]:
    """Append the notice to each run's events (``NoteRun``, in the caller's transaction)."""
    details: dict[str, object] = {
        "kind": notice.kind,
        "title": notice.title,
        "text": notice.text,
        "long_task_id": notice.task_id,
        "handle": format_handle(notice.handle),
        "command": notice.command,
    }
    results = []
    for run_id in runs:
        note = c.NoteRun(run_id, actor, type=c.LONG_TASK_NOTICE, details=dict(details))
        results.append(await transitions.execute_in(tx, note))
    return results


async def write_notice(
    sql: NoticeStatements,
    tx: DoorTx,
    facts: ChangeFacts,
    task: Task,
    now: int,
    new_id: Callable[[], str],
) -> StoredNotice | None:
    """Insert the change's notice and its deliveries; the notice, or None (no notice, or the
    same fact was noticed already)."""
    notice = notice_for(facts)
    if notice is None:
        return None
    stored = StoredNotice(
        id=new_id(),
        task_id=task.id,
        project_id=task.project_id,
        owner_id=task.owner_id,
        handle=task.handle,
        kind=notice.kind.value,
        dedupe_key=notice.dedupe_key,
        decision_id=notice.decision_id,
        task_state=task.state.value,
        task_version=task.state_version,
        title=notice.title[:256],
        text=notice.text,
        created_at_ms=now,
        source_run_id=task.source_run_id,
        source_ref=task.source_ref,
        command=notice.command[:512],
    )
    if not await sql.insert_notice(tx, stored):
        return None
    for webhook in await sql.webhooks_of(tx, task.project_id, task.owner_id):
        delivery = Delivery(
            id=new_id(),
            notice_id=stored.id,
            webhook_id=webhook.id,
            project_id=task.project_id,
            owner_id=task.owner_id,
            state=PENDING,
            tries=0,
            next_at_ms=now,
            last_status=None,
            last_error="",
            delivered_at_ms=None,
            created_at_ms=now,
        )
        await sql.insert_delivery(tx, delivery)
    return stored
