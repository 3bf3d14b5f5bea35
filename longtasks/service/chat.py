"""Text commands for chat surfaces without buttons (docs/long-tasks.md "One action contract
and short handles"): a message parsed by ``domain/text_commands.py``, acted on through the
one action contract (``actions.py``), answered with a reply a person reads. The chat surface
presents; nothing of the task's state machine is repeated here.

A refusal of the action (a stale version, a move the rules refuse, no such handle among the
owner's tasks in the project) is a reply naming it, with the stable reason, and nothing is
changed; a handle is never guessed from, and a short answer is taken only when exactly one
decision of the owner is open. The message's arrival, the action's result and the reply are
logged separately, so "the input never came", "the action failed" and "the reply failed"
can be told apart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from coordinator.domain.model import Actor
from kernel.errors import DomainError
from longtasks.domain.actions import Outcome, format_handle
from longtasks.domain.model import Task
from longtasks.domain.text_commands import USAGE, Kind, action_of, parse, prompt, short_answer
from longtasks.service.actions import Acted, ActRequest, TaskActions
from longtasks.store.sql import LongTaskSql

log = logging.getLogger("truerun.longtasks.chat")


@dataclass(frozen=True, slots=True)
class Replied:
    reply: str
    task: Task | None = None  # the task acted on (as it was resolved)
    outcome: Outcome | None = None
    refusal: str = ""  # the stable reason an action was refused, if it was


class ChatCommands:
    def __init__(self, actions: TaskActions, sql: LongTaskSql) -> None:
        self._actions = actions
        self._sql = sql

    async def handle(
        self, project_id: str, owner_id: str, text: str, action_id: str, actor: Actor
    ) -> Replied:
        """Answer one chat message of ``owner_id`` in the project (the caller sees it)."""
        log.info("text command arrived: owner %s, action id %s", owner_id, action_id)
        replied = await self._handle(project_id, owner_id, text, action_id, actor)
        log.info(
            "text command replied: owner %s, action id %s, outcome %s, refusal %s",
            owner_id,
            action_id,
            replied.outcome,
            replied.refusal or "-",
        )
        return replied

    async def _handle(
        self, project_id: str, owner_id: str, text: str, action_id: str, actor: Actor
    ) -> Replied:
        parsed = parse(text)
        if parsed.kind is Kind.HELP:
            return Replied(USAGE)
        if parsed.kind is Kind.INVALID:
            return Replied(parsed.error)
        if parsed.kind is Kind.LIST:
            return Replied(await self._listing(project_id, owner_id))
        if parsed.kind is Kind.ACT:
            assert parsed.action is not None and parsed.handle is not None
            tag = format_handle(parsed.handle)
            try:
                task = await self._actions.resolve(project_id, owner_id, tag)
                request = ActRequest(
                    task, parsed.action, action_id, actor, parsed.version, answer=parsed.answer
                )
                return _done(task, tag, await self._actions.act(request))
            except DomainError as refused:
                return Replied(f"{tag}: {refused.message}", refusal=refused.reason.value)
        return await self._short(project_id, owner_id, parsed.answer, action_id, actor)

    async def _short(
        self, project_id: str, owner_id: str, reply: str, action_id: str, actor: Actor
    ) -> Replied:
        """A natural short answer: only to the owner's one open decision, never a guess. A
        redelivered message (its id kept already) is answered as done, not acted on again."""
        kept = await self._sql.action_of_owner(project_id, owner_id, action_id)
        if action_id and kept is not None:
            handle, record = kept
            task = await self._sql.get_task(record.task_id)
            return _done(task, format_handle(handle), Acted(Outcome.ALREADY_DONE, record))
        waiting = await self._sql.open_decisions_of(project_id, owner_id)
        if not waiting:
            return Replied(f"Nothing of yours is waiting for an answer.\n{USAGE}")
        if len(waiting) > 1:
            prompts = []
            for handle, decision in waiting:
                task = await self._sql.get_task(decision.task_id)
                version = task.state_version if task else decision.task_version
                prompts.append(prompt(handle, decision, version))
            head = f"{len(waiting)} decisions are open; name the task's handle:"
            return Replied("\n\n".join([head, *prompts]), refusal="AMBIGUOUS_SHORT_ANSWER")
        handle, decision = waiting[0]
        tag = format_handle(handle)
        try:
            task = await self._actions.resolve(project_id, owner_id, tag)
            answer = short_answer(reply, decision.kind)
            if answer is None:
                why = (
                    f"{reply!r} does not answer it.\n{prompt(handle, decision, task.state_version)}"
                )
                return Replied(why, task, refusal="ANSWER_NOT_OFFERED")
            request = ActRequest(
                task,
                action_of(decision.kind, answer),
                action_id,
                actor,
                decision_id=decision.id,
                answer=answer,
            )
            return _done(task, tag, await self._actions.act(request))
        except DomainError as refused:
            return Replied(f"{tag}: {refused.message}", refusal=refused.reason.value)

    async def _listing(self, project_id: str, owner_id: str) -> str:
        tasks = await self._sql.unfinished_of(project_id, owner_id)
        if not tasks:
            return "You have no unfinished long tasks here."
        lines = [
            f"{format_handle(t.handle)} {t.state} (version {t.state_version}): {t.goal[:80]}"
            for t in tasks
        ]
        versions = {t.id: t.state_version for t in tasks}
        for handle, decision in await self._sql.open_decisions_of(project_id, owner_id):
            version = versions.get(decision.task_id, decision.task_version)
            lines.append(prompt(handle, decision, version))
        return "\n".join(lines)


def _done(task: Task | None, tag: str, acted: Acted) -> Replied:
    record = acted.record
    if acted.outcome is Outcome.ALREADY_DONE:
        text = f"{tag}: {record.action} was done already (version {record.task_version})."
    else:
        text = f"{tag}: {record.action} done (now version {record.task_version})."
    return Replied(text, task, acted.outcome)
