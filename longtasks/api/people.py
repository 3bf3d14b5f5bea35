"""LongTaskService over gRPC: long tasks for people and their tools. Behind the bearer-token
interceptor like every service (coordinator/api/auth.py); the caller must see the task's
project, and to anyone else its tasks do not exist (NOT_FOUND). The actor of every command
is the caller (a person's token: ``user``; an app's: ``api_app``), never a request field.
Each mutation is one door method with the task's etag (docs/long-tasks.md "API")."""

from __future__ import annotations

import base64
from typing import Any

import grpc
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1 import long_task_service_pb2_grpc

from coordinator.api import validation
from coordinator.api.auth import caller
from coordinator.api.authorization import allow, served
from coordinator.api.errors import unary
from coordinator.dispatch.tokens import RuntimeTokens
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from kernel.errors import (
    InvalidArgument,
    LongTaskLimitReached,
    LongTaskNotFound,
    PermissionDenied,
)
from kernel.ids import now_ms
from longtasks.api import drafts
from longtasks.api.continuations import continuation_from_proto
from longtasks.api.convert import event_to_proto, task_summary, task_to_proto
from longtasks.api.notices import NoticeRpcs
from longtasks.domain.actions import Action
from longtasks.domain.model import Task
from longtasks.domain.queue import unfinished_cap_refusal
from longtasks.domain.resolutions import Resolution
from longtasks.domain.states import PlanAuthor
from longtasks.service.actions import ActRequest, TaskActions
from longtasks.service.chat import ChatCommands
from longtasks.service.door import LongTaskDoor
from longtasks.service.inputs import NewCriterion
from longtasks.service.notices import NoticeDesk
from longtasks.service.reads import TaskReads
from longtasks.service.report import render
from longtasks.service.report_html import render_html

Ctx = grpc.aio.ServicerContext[Any, Any]
MAX_PAGE = 200
MAX_EVENTS = 1000
_AUTHORS = {"": PlanAuthor.USER, "user": PlanAuthor.USER, "model": PlanAuthor.MODEL}


def _actor() -> Actor:
    who = caller()
    return Actor(ActorType.USER if who.named else ActorType.API_APP, who.name)


def _etag(value: str) -> int:
    expected = validation.etag(value)
    if expected is None:
        raise InvalidArgument("etag is required: read the task, then send its etag")
    return expected


def _resolution(value: str) -> Resolution:
    """ClearRecovery's resolution; empty is ``go_on`` (the request as it was before)."""
    try:
        return Resolution(value or Resolution.GO_ON)
    except ValueError:
        offered = ", ".join(r.value for r in Resolution)
        raise InvalidArgument(f"resolution must be one of {offered}, not {value!r}") from None


def _page_token(task: Task) -> str:
    return base64.urlsafe_b64encode(f"{task.created_at_ms}\0{task.id}".encode()).decode()


def _after(token: str) -> tuple[int, str] | None:
    if not token:
        return None
    try:
        at, task_id = base64.urlsafe_b64decode(token).decode().split("\0")
        return int(at), task_id
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument("page_token is not one this server issued") from None


class LongTaskServicer(NoticeRpcs, long_task_service_pb2_grpc.LongTaskServiceServicer):
    def __init__(
        self,
        door: LongTaskDoor,
        reads: TaskReads,
        max_unfinished: int = 0,
        notices: NoticeDesk | None = None,
        bindings: RuntimeTokens | None = None,
    ) -> None:
        """``max_unfinished``: TRUERUN_LONG_TASK_OWNER_MAX_UNFINISHED (0 = no cap);
        ``notices``: the owners' notices and webhooks (api/notices.py); ``bindings``: the
        runtime tokens of this process (a task for an owner no runtime serves in the
        project is refused, OWNER_NOT_SERVED)."""
        self._bindings = bindings
        self._notices = notices
        self._door = door
        self._reads = reads
        self._max_unfinished = max_unfinished
        self._actions = TaskActions(door, reads.sql)
        self._chat = ChatCommands(self._actions, reads.sql)

    async def _seen(self, project_id: str, task_id: str) -> Task:
        """The task, if the caller sees its project; to anyone else it does not exist."""
        project = validation.name(project_id, "project_id") or ""
        task_id = validation.name(task_id, "long_task_id") or ""
        missing = LongTaskNotFound(
            f"long task {task_id} does not exist in project {project}", task_id=task_id
        )
        if not caller().sees(project):
            raise missing
        task = await self._reads.find(task_id)
        if task is None or task.project_id != project:
            raise missing
        return task

    async def _acting(self, project_id: str, task_id: str, method: str) -> Task:
        """The task, if the caller may act on it by ``method``'s rule: another project's
        task is a missing one, another owner's needs a token acting for that owner
        (OWNER_NOT_PERMITTED; docs/tenancy.md)."""
        task = await self._seen(project_id, task_id)
        allow(f"LongTaskService.{method}", task.project_id, task.owner_id)
        return task

    async def _answer(self, task_id: str) -> pb.LongTask:
        return task_to_proto(await self._reads.view(task_id))

    @unary
    async def CreateLongTask(self, request: pb.CreateLongTaskRequest, context: Ctx) -> pb.LongTask:
        new = drafts.new_task(request.long_task)
        if not caller().sees(new.project_id):
            raise PermissionDenied(
                f"this token may not create long tasks in project {new.project_id}"
            )
        allow("LongTaskService.CreateLongTask", new.project_id, new.owner_id)
        served(self._bindings, new.owner_id, new.project_id)
        # counted before the create's transaction: two creates racing may both pass at the
        # cap's edge (one task over); the cap bounds a runaway client, not a quota ledger.
        # An explicit override passes it (automatic promotion never does: promotion.py)
        count = await self._reads.unfinished_of_owner(new.owner_id)
        refused = unfinished_cap_refusal(count, self._max_unfinished)
        if refused is not None and not request.override_unfinished_cap:
            raise LongTaskLimitReached(refused, owner_id=new.owner_id)
        actor = _actor()
        created = await self._door.create(new, actor)
        if request.start:  # queued in a second command: a refusal leaves it planned, visibly
            await self._door.enqueue(created.task.id, created.task.state_version, actor)
        return await self._answer(created.task.id)

    @unary
    async def GetLongTask(self, request: pb.GetLongTaskRequest, context: Ctx) -> pb.LongTask:
        task = await self._seen(request.project_id, request.long_task_id)
        return await self._answer(task.id)

    @unary
    async def ListLongTasks(
        self, request: pb.ListLongTasksRequest, context: Ctx
    ) -> pb.ListLongTasksResponse:
        project = validation.name(request.project_id, "project_id") or ""
        if not caller().sees(project):
            raise PermissionDenied(f"this token may not list project {project}")
        owner = validation.name(request.owner_id, "owner_id", required=False)
        size = validation.in_range(request.page_size or 50, "page_size", 1, MAX_PAGE)
        found = await self._reads.page(
            project, owner, request.active_only, _after(request.page_token), size + 1
        )
        page = found[:size]
        token = _page_token(page[-1][0]) if len(found) > size else ""
        return pb.ListLongTasksResponse(
            long_tasks=[task_summary(*entry) for entry in page], next_page_token=token
        )

    @unary
    async def StartLongTask(self, request: pb.StartLongTaskRequest, context: Ctx) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "StartLongTask")
        await self._door.enqueue(task.id, _etag(request.etag), _actor())
        return await self._answer(task.id)

    @unary
    async def PauseLongTask(self, request: pb.PauseLongTaskRequest, context: Ctx) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "PauseLongTask")
        note = drafts.text(request.note, "note", 1024)
        await self._door.pause(task.id, _etag(request.etag), _actor(), note)
        return await self._answer(task.id)

    @unary
    async def ResumeLongTask(self, request: pb.ResumeLongTaskRequest, context: Ctx) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "ResumeLongTask")
        await self._door.resume(task.id, _etag(request.etag), _actor())
        return await self._answer(task.id)

    @unary
    async def CancelLongTask(self, request: pb.CancelLongTaskRequest, context: Ctx) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "CancelLongTask")
        note = drafts.text(request.note, "note", 1024)
        await self._door.cancel(task.id, _etag(request.etag), _actor(), note)
        return await self._answer(task.id)

    @unary
    async def ScheduleContinuation(
        self, request: pb.ScheduleContinuationRequest, context: Ctx
    ) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "ScheduleContinuation")
        asked = continuation_from_proto(request.continuation, task.id, now_ms())
        await self._door.schedule_continuation(task.id, _etag(request.etag), _actor(), asked)
        return await self._answer(task.id)

    @unary
    async def ClearRecovery(self, request: pb.ClearRecoveryRequest, context: Ctx) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "ClearRecovery")
        note = drafts.text(request.note, "note", 1024)
        resolution = _resolution(request.resolution)
        await self._door.clear_recovery(task.id, _etag(request.etag), _actor(), note, resolution)
        return await self._answer(task.id)

    @unary
    async def RevisePlan(self, request: pb.RevisePlanRequest, context: Ctx) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "RevisePlan")
        author = _AUTHORS.get(request.author)
        if author is None:
            raise InvalidArgument('author must be "user" (the default) or "model"')
        await self._door.revise_plan(
            task.id,
            _etag(request.etag),
            _actor(),
            drafts.text(request.reason, "reason", 1024, required=True),
            author,
            drafts.step_drafts(request.steps, required=False),
            drafts.criterion_drafts(request.criteria),
            goal=drafts.text(request.goal, "goal", drafts.MAX_GOAL) or None,
            constraints=drafts.texts(request.constraints, "constraints")
            if request.revise_constraints
            else None,
        )
        return await self._answer(task.id)

    @unary
    async def ContinueLongTask(
        self, request: pb.ContinueLongTaskRequest, context: Ctx
    ) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "ContinueLongTask")
        await self._door.continue_task(
            task.id,
            _etag(request.etag),
            _actor(),
            drafts.text(request.reason, "reason", 1024, required=True),
            drafts.step_drafts(request.steps, required=False),
            drafts.criterion_drafts(request.criteria),
        )
        return await self._answer(task.id)

    @unary
    async def AnswerDecision(self, request: pb.AnswerDecisionRequest, context: Ctx) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "AnswerDecision")
        decision_id = validation.name(request.decision_id, "decision_id") or ""
        await self._door.answer(
            task.id,
            decision_id,
            _etag(request.etag),
            _actor(),
            drafts.text(request.answer, "answer", required=True),
            drafts.text(request.note, "note", 1024),
        )
        return await self._answer(task.id)

    @unary
    async def EditCriterion(self, request: pb.EditCriterionRequest, context: Ctx) -> pb.LongTask:
        task = await self._acting(request.project_id, request.long_task_id, "EditCriterion")
        if request.waive == bool(request.text):
            raise InvalidArgument("give exactly one of waive and text")
        wording = drafts.text(request.text, "text")
        view = await self._reads.view(task.id)
        wanted = request.criterion_id
        if wanted not in {c.criterion.id for c in view.criteria}:
            raise InvalidArgument(f"no criterion {wanted!r} in the task's current plan")
        criteria = []
        for record in view.criteria:  # the current criteria, the one edited
            c = record.criterion
            if c.id == wanted:
                text, required = (c.text, False) if request.waive else (wording, c.required)
            else:
                text, required = c.text, c.required
            criteria.append(NewCriterion(c.id, text, c.checker, record.checker_spec, required))
        what = "waived" if request.waive else "reworded"
        reason = drafts.text(request.reason, "reason", 1024) or f"criterion {wanted} {what}"
        await self._door.revise_plan(
            task.id, _etag(request.etag), _actor(), reason, PlanAuthor.USER, None, criteria
        )
        return await self._answer(task.id)

    @unary
    async def ListLongTaskEvents(
        self, request: pb.ListLongTaskEventsRequest, context: Ctx
    ) -> pb.ListLongTaskEventsResponse:
        task = await self._seen(request.project_id, request.long_task_id)
        size = validation.in_range(request.page_size or 100, "page_size", 1, MAX_EVENTS)
        if request.after_sequence < 0:
            raise InvalidArgument("after_sequence may not be negative")
        events = await self._reads.events(task.id, request.after_sequence, size)
        return pb.ListLongTaskEventsResponse(events=[event_to_proto(e) for e in events])

    @unary
    async def ExportLongTask(
        self, request: pb.ExportLongTaskRequest, context: Ctx
    ) -> pb.ExportLongTaskResponse:
        task = await self._seen(request.project_id, request.long_task_id)
        if request.format not in pb.ExportFormat.values():
            raise InvalidArgument("format must be markdown or html", field="format")
        view = await self._reads.view(task.id)
        if request.format == pb.EXPORT_FORMAT_HTML:
            return pb.ExportLongTaskResponse(html=render_html(view))
        return pb.ExportLongTaskResponse(markdown=render(view))

    # -- the one action contract (docs/long-tasks.md "One action contract and short handles")

    def _owner(self, owner_id: str) -> str:
        """Whose handles a request uses: the owner it names, else the caller's own name (a
        person's token); an app's token must name one."""
        owner = validation.name(owner_id, "owner_id", required=False)
        who = caller()
        return owner or (who.name if who.named else "")

    @unary
    async def Act(self, request: pb.ActRequest, context: Ctx) -> pb.ActResponse:
        project = validation.name(request.project_id, "project_id") or ""
        if request.action not in {a.value for a in Action}:
            raise InvalidArgument(f"action must be one of {', '.join(a.value for a in Action)}")
        ref = drafts.text(request.task, "task", 140, required=True)
        if not caller().sees(project):  # the same answer as a task of another project
            raise LongTaskNotFound(f"long task {ref} does not exist in project {project}")
        task = await self._actions.resolve(project, self._owner(request.owner_id), ref)
        # a handle or id names a task; authority comes from the token (docs/tenancy.md)
        allow("LongTaskService.Act", task.project_id, task.owner_id)
        acted = await self._actions.act(
            ActRequest(
                task,
                Action(request.action),
                request.action_id,
                _actor(),
                validation.etag(request.etag),
                validation.name(request.decision_id, "decision_id", required=False) or "",
                drafts.text(request.answer, "answer", 256),
                drafts.text(request.note, "note", 1024),
            )
        )
        return pb.ActResponse(
            long_task=await self._answer(task.id),
            outcome=acted.outcome.value,
            action_etag=str(acted.record.task_version),
        )

    @unary
    async def TextCommand(
        self, request: pb.TextCommandRequest, context: Ctx
    ) -> pb.TextCommandResponse:
        project = validation.name(request.project_id, "project_id") or ""
        if not caller().sees(project):
            raise PermissionDenied(f"this token may not act in project {project}")
        owner = self._owner(request.owner_id)
        if not owner:
            raise InvalidArgument("owner_id is required: the person who wrote the message")
        allow("LongTaskService.TextCommand", project, owner)
        text = drafts.text(request.text, "text", 4096, required=True)
        replied = await self._chat.handle(project, owner, text, request.action_id, _actor())
        answer = pb.TextCommandResponse(
            reply=replied.reply,
            outcome=replied.outcome.value if replied.outcome is not None else "",
            refusal=replied.refusal,
        )
        if replied.task is not None and replied.outcome is not None:
            answer.long_task.CopyFrom(await self._answer(replied.task.id))
        return answer
