"""The notices outbox, written by the door's commit (``base.py``): the pure rule
(``longtasks.domain.notices.notice_for``) reads what the change did, and the notice it
raises is inserted in the same transaction, with one pending delivery per webhook the
task's owner registered in its project. The dedupe key is unique: when a second writer
meets the same fact (process start and the watcher both burying one attempt), its insert
is a no-op and it writes no deliveries either."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator.store.base import RunTxReader
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


async def write_notice(
    sql: NoticeStatements,
    tx: RunTxReader,
    facts: ChangeFacts,
    task: Task,
    now: int,
    new_id: Callable[[], str],
) -> str | None:
    """Insert the change's notice and its deliveries; the notice's kind, or None (no notice,
    or the same fact was noticed already)."""
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
    return stored.kind
