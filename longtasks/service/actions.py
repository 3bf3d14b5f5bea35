"""The one action contract (docs/long-tasks.md "One action contract and short handles";
seed C: "暂停、继续、取消、回答决定始终调用同一组带 Durable Execution id、预期版本和一次性
action id 的共享动作"). Every surface (the Act RPC, its REST route, the text commands of chat
surfaces without buttons) acts through ``TaskActions.act``:

- the task named by its id or by its owner's short handle (``#3``), resolved here; the
  caller's authorization (it sees the project, the task is in it) is checked by the API
  before anything is read, and again against the resolved task, the same way for both;
- exactly once by the client's one-time action id: a kept id answers ``already_done`` and
  acts no second time; the door keeps the id in the transaction of the change
  (``DoorBase._act``), so two requests racing with one id make one change;
- carried out by the door's own methods (``pause``, ``resume``, ``cancel``,
  ``continue_task``, ``answer``) with the expected version: there is no second write path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from coordinator.domain.model import Actor
from kernel.errors import (
    InvalidArgument,
    LongTaskNotFound,
    LongTaskVersionConflict,
    RequestIdReused,
)
from longtasks.domain.actions import (
    Action,
    ActionRecord,
    Outcome,
    answer_of,
    choose_decision,
    parse_handle,
    valid_action_id,
)
from longtasks.domain.model import Task
from longtasks.domain.rules import Refusal, Refused
from longtasks.service.door import LongTaskDoor
from longtasks.service.errors import task_error
from longtasks.store.action_sql import ActionTaken
from longtasks.store.sql import LongTaskSql

log = logging.getLogger("truerun.longtasks.actions")


@dataclass(frozen=True, slots=True)
class ActRequest:
    """One action as any surface asks for it. ``expected_version`` None: the task as it is
    now (a text command without a version); the action id still makes it exactly once."""

    task: Task
    action: Action
    action_id: str
    actor: Actor
    expected_version: int | None = None
    decision_id: str = ""
    answer: str = ""
    note: str = ""


@dataclass(frozen=True, slots=True)
class Acted:
    outcome: Outcome
    record: ActionRecord  # as kept: the version the change made


class TaskActions:
    def __init__(self, door: LongTaskDoor, sql: LongTaskSql) -> None:
        self._door = door
        self._sql = sql

    async def resolve(self, project_id: str, owner_id: str, ref: str) -> Task:
        """The task ``ref`` names in the project: a handle (``#3``) among ``owner_id``'s
        tasks, else a task id. Not there, or in another project: ``LONG_TASK_NOT_FOUND``,
        the same answer a task of a project the caller does not see gets."""
        handle = parse_handle(ref) if ref.startswith("#") else None
        task = None
        if handle is not None:
            if not owner_id:
                raise InvalidArgument("a handle is the owner's: give owner_id, or a task id")
            task = await self._sql.task_by_handle(owner_id, handle)
        elif ref.strip():
            task = await self._sql.get_task(ref.strip())
        if task is None or task.project_id != project_id:
            raise LongTaskNotFound(
                f"long task {ref} does not exist in project {project_id}", task_id=ref
            )
        return task

    async def act(self, request: ActRequest) -> Acted:
        task = request.task
        if not valid_action_id(request.action_id):
            raise InvalidArgument(
                "action_id is required: one id per action, chosen by the client "
                "(1-128 letters, digits or ._:@/+=-)"
            )
        answer = answer_of(request.action, request.answer) if request.action.answers else ""
        asked = ActionRecord(
            task.id,
            request.action_id,
            request.action,
            request.decision_id or None,
            answer or None,
            request.actor.type.value,
            request.actor.id,
        )
        kept = await self._kept(asked)
        if kept is not None:
            return kept
        expected = request.expected_version
        version = task.state_version if expected is None else expected
        try:
            return await self._carry_out(request, asked, version)
        except (ActionTaken, LongTaskVersionConflict):
            # another request with this action id may have made the change meanwhile
            kept = await self._kept(asked)
            if kept is None:
                raise
            return kept

    async def _kept(self, asked: ActionRecord) -> Acted | None:
        kept = await self._sql.action(asked.task_id, asked.action_id)
        if kept is None:
            return None
        if not kept.same_request(asked):
            raise RequestIdReused(
                f"action id {asked.action_id} was used for {kept.action} on this task; "
                "choose a new id for a new action",
                action_id=asked.action_id,
            )
        log.info("long task %s: action %s already done", asked.task_id, asked.action_id)
        return Acted(Outcome.ALREADY_DONE, kept)

    async def _carry_out(self, request: ActRequest, asked: ActionRecord, version: int) -> Acted:
        task, actor, action, door = request.task, request.actor, request.action, self._door
        if action is Action.PAUSE:
            await door.pause(task.id, version, actor, request.note, action=asked)
        elif action is Action.RESUME:
            await door.resume(task.id, version, actor, action=asked)
        elif action is Action.CANCEL:
            await door.cancel(task.id, version, actor, request.note, action=asked)
        elif action is Action.CONTINUE:
            reason = request.note or f"continued by {actor.id}"
            await door.continue_task(task.id, version, actor, reason, action=asked)
        else:
            decisions = await self._sql.decisions(None, task.id)
            choice = choose_decision(action, decisions, request.decision_id)
            if choice.decision is None:
                if choice.ambiguous:
                    raise InvalidArgument(choice.why, task_id=task.id)
                raise task_error(Refused(Refusal.DECISION_CLOSED, choice.why), task.id)
            asked = ActionRecord(
                asked.task_id,
                asked.action_id,
                asked.action,
                choice.decision.id,
                asked.answer,
                asked.actor_type,
                asked.actor_id,
            )
            await door.answer(
                task.id,
                choice.decision.id,
                version,
                actor,
                asked.answer or "",
                request.note,
                action=asked,
            )
        kept = await self._sql.action(task.id, asked.action_id)
        assert kept is not None  # kept in the transaction that just committed
        log.info("long task %s: %s done (action %s)", task.id, action, asked.action_id)
        return Acted(Outcome.DONE, kept)
