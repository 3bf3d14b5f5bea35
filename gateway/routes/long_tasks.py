"""Long tasks (LongTaskService, docs/long-tasks.md): create, list, get, the commands a person
gives (start, pause, resume, cancel, clearRecovery, continue, revisePlan, answer,
editCriterion, scheduleContinuation), the task's log and its Markdown export; the one action
contract (``longTasks:act``, a task named by id or short handle, exactly once per action id) and
the text commands of chat surfaces without buttons (``longTasks:text``).

Every command carries the task's etag as the caller read it, in the body: the services
compare it, so a stale one is 409 LONG_TASK_VERSION_CONFLICT and changes nothing. A task of a
project the token does not see answers exactly like a missing one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import long_task_service_pb2 as pb

from gateway import messages
from gateway.http import int_param, json_response
from gateway.problems import Problem
from gateway.routes.common import CALL_TIMEOUT_S, body_of, context, endpoint, principal
from gateway.routes.spec import Handler
from gateway.tokens import Principal

#: The path's names: a body that names them too must agree, so they are not body fields.
_PATH_FIELDS = ("project_id", "long_task_id")
_TRUE = {"true", "1"}
_FALSE = {"false", "0", ""}
MARKDOWN = "text/markdown; charset=utf-8"
HTML = "text/html; charset=utf-8"
_FORMATS = {"markdown": pb.EXPORT_FORMAT_MARKDOWN, "html": pb.EXPORT_FORMAT_HTML}

#: ``POST .../longTasks/{long_task}:<verb>`` -> the RPC and its request message. The body is
#: the request without the path's fields; etag is always required.
COMMANDS: dict[str, tuple[str, type[Message]]] = {
    "start": ("StartLongTask", pb.StartLongTaskRequest),
    "pause": ("PauseLongTask", pb.PauseLongTaskRequest),
    "resume": ("ResumeLongTask", pb.ResumeLongTaskRequest),
    "cancel": ("CancelLongTask", pb.CancelLongTaskRequest),
    "clearRecovery": ("ClearRecovery", pb.ClearRecoveryRequest),
    "continue": ("ContinueLongTask", pb.ContinueLongTaskRequest),
    "revisePlan": ("RevisePlan", pb.RevisePlanRequest),
    "answer": ("AnswerDecision", pb.AnswerDecisionRequest),
    "editCriterion": ("EditCriterion", pb.EditCriterionRequest),
    "scheduleContinuation": ("ScheduleContinuation", pb.ScheduleContinuationRequest),
}


def not_found(project: str, task_id: str) -> Problem:
    # Word for word what LongTaskService says (longtasks/api/people.py), so another
    # project's task is indistinguishable from a missing one.
    return Problem(
        404, "LONG_TASK_NOT_FOUND", f"long task {task_id} does not exist in project {project}"
    )


def _named(request: Request, who: Principal) -> tuple[str, str]:
    """The path's project and task; another project's task is a missing one."""
    project = request.path_params["project"]
    task_id = request.path_params["long_task"]
    if not who.sees(project):
        raise not_found(project, task_id)
    return project, task_id


def task_path(task: pb.LongTask) -> str:
    return f"/v1/projects/{task.project_id}/longTasks/{task.long_task_id}"


def _task_response(task: pb.LongTask, status: int = 200, location: bool = False) -> Response:
    headers = {"ETag": task.etag}
    if location:
        headers["Location"] = task_path(task)
    return json_response(messages.to_dict(task), status, headers)


def _bool_param(raw: str | None, name: str) -> bool:
    value = (raw or "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise Problem(400, "INVALID_ARGUMENT", f"{name} must be true or false")


def _no_path_fields(document: dict[str, Any]) -> None:
    for name in _PATH_FIELDS:
        if name in document:
            raise Problem(400, "INVALID_ARGUMENT", f"{name} is the path's, not a body field")


# -- reads -----------------------------------------------------------------------------


@endpoint
async def list_long_tasks(request: Request) -> Response:
    """Newest first. A project the token does not see is empty (its parameters still
    checked)."""
    who = principal(request)
    project = request.path_params["project"]
    query = request.query_params
    listing = pb.ListLongTasksRequest(
        project_id=project,
        owner_id=query.get("owner_id", ""),
        active_only=_bool_param(query.get("active_only"), "active_only"),
        page_size=int_param(query.get("page_size"), "page_size"),
        page_token=query.get("page_token", ""),
    )
    if not who.sees(project):
        return json_response(messages.to_dict(pb.ListLongTasksResponse()))
    answer = await context(request).long_tasks.ListLongTasks(listing, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer))


@endpoint
async def get_long_task(request: Request) -> Response:
    project, task_id = _named(request, principal(request))
    task = await context(request).long_tasks.GetLongTask(
        pb.GetLongTaskRequest(project_id=project, long_task_id=task_id), timeout=CALL_TIMEOUT_S
    )
    return _task_response(task)


@endpoint
async def list_long_task_events(request: Request) -> Response:
    project, task_id = _named(request, principal(request))
    query = request.query_params
    answer = await context(request).long_tasks.ListLongTaskEvents(
        pb.ListLongTaskEventsRequest(
            project_id=project,
            long_task_id=task_id,
            after_sequence=int_param(query.get("after_sequence"), "after_sequence", 2**63),
            page_size=int_param(query.get("page_size"), "page_size"),
        ),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(answer))


@endpoint
async def export_long_task(request: Request) -> Response:
    """The report, as the services wrote it (``?format=markdown``, the default, or
    ``html``): for reading, never read back."""
    project, task_id = _named(request, principal(request))
    wanted = request.query_params.get("format", "markdown") or "markdown"
    if wanted not in _FORMATS:
        raise Problem(400, "INVALID_ARGUMENT", "format must be markdown or html")
    answer = await context(request).long_tasks.ExportLongTask(
        pb.ExportLongTaskRequest(project_id=project, long_task_id=task_id, format=_FORMATS[wanted]),
        timeout=CALL_TIMEOUT_S,
    )
    if wanted == "html":
        return Response(answer.html, media_type=HTML)
    return Response(answer.markdown, media_type=MARKDOWN)


# -- writes ----------------------------------------------------------------------------


@endpoint
async def create_long_task(request: Request) -> Response:
    """The body is a LongTaskDraft plus ``start`` (queue it at once); project_id is the
    path's."""
    who = principal(request)
    project = request.path_params["project"]
    if not who.sees(project):
        raise Problem(403, "PERMISSION_DENIED", f"this token may not act in {project}")
    document = await body_of(request)
    start = document.pop("start", False)
    if not isinstance(start, bool):
        raise Problem(400, "INVALID_ARGUMENT", "start must be true or false")
    draft = messages.from_dict(document, pb.LongTaskDraft())
    if draft.project_id and draft.project_id != project:
        raise Problem(400, "INVALID_ARGUMENT", "project_id differs from the path's project")
    draft.project_id = project
    task = await context(request).long_tasks.CreateLongTask(
        pb.CreateLongTaskRequest(long_task=draft, start=start), timeout=CALL_TIMEOUT_S
    )
    return _task_response(task, 201, location=True)


def command(verb: str) -> Handler:
    """The handler of ``POST .../longTasks/{long_task}:<verb>``: the body (the request
    without the path's fields, etag required) goes to the verb's RPC as it is."""
    rpc, message = COMMANDS[verb]

    @endpoint
    async def handler(request: Request) -> Response:
        project, task_id = _named(request, principal(request))
        document = await body_of(request)
        _no_path_fields(document)
        asked: Any = messages.from_dict(document, message())
        if not asked.etag:
            raise Problem(
                400,
                "INVALID_ARGUMENT",
                "etag is required: send the task's etag as you read it (GET the task)",
            )
        asked.project_id, asked.long_task_id = project, task_id
        call: Callable[..., Any] = getattr(context(request).long_tasks, rpc)
        task: pb.LongTask = await call(asked, timeout=CALL_TIMEOUT_S)
        return _task_response(task)

    handler.__name__ = handler.__qualname__ = f"{verb}_long_task"
    return handler


COMMAND_HANDLERS: dict[str, Handler] = {verb: command(verb) for verb in COMMANDS}


# -- the one action contract (docs/long-tasks.md "One action contract and short handles")


async def _project_body(request: Request) -> tuple[str, dict[str, Any]]:
    document = await body_of(request)
    if "project_id" in document:
        raise Problem(400, "INVALID_ARGUMENT", "project_id is the path's, not a body field")
    return request.path_params["project"], document


@endpoint
async def act_on_long_task(request: Request) -> Response:
    """The body is an ActRequest without project_id: the task by id or handle ("#3", the
    owner_id's or the caller's own), the action, the etag, a one-time action_id."""
    who = principal(request)
    project, document = await _project_body(request)
    asked = messages.from_dict(document, pb.ActRequest())
    if not who.sees(project):
        raise not_found(project, asked.task)
    asked.project_id = project
    answer = await context(request).long_tasks.Act(asked, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer), 200, {"ETag": answer.long_task.etag})


@endpoint
async def text_command(request: Request) -> Response:
    """The body is a TextCommandRequest without project_id: a chat message of owner_id."""
    who = principal(request)
    project, document = await _project_body(request)
    if not who.sees(project):
        raise Problem(403, "PERMISSION_DENIED", f"this token may not act in {project}")
    asked = messages.from_dict(document, pb.TextCommandRequest())
    asked.project_id = project
    answer = await context(request).long_tasks.TextCommand(asked, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer))
