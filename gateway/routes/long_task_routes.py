"""The route table's entries for long tasks (gateway/routes/long_tasks.py), appended to
``ROUTES`` (gateway/routes/__init__.py): every LongTaskService RPC as a REST resource, the
commands as custom methods (``:pause``) that carry the task's etag in the body."""

from __future__ import annotations

from gateway.routes import long_task_stream, long_tasks
from gateway.routes.spec import (
    ACCESS_TOKEN,
    AFTER_SEQUENCE,
    PAGE_TOKEN,
    PROJECT,
    Entry,
    Operation,
    Schema,
    json_response,
    param,
    problems,
    ref,
)

LONG_TASKS = "/v1/projects/{project}/longTasks"
ONE_LONG_TASK = f"{LONG_TASKS}/{{long_task}}"
LONG_TASK = param("long_task", "path", "the long task id")
EXPORT_FORMAT = param(
    "format",
    "query",
    "markdown (the default) or html (every stored string escaped)",
    {"type": "string", "enum": ["markdown", "html"]},
)
LONG_TASK_PAGE_SIZE = param(
    "page_size",
    "query",
    "maximum items per page; 0 = server default",
    {"type": "integer", "minimum": 0, "maximum": 1000},
)
_PROBLEM_CONTENT = {"application/problem+json": {"schema": {"$ref": ref("Problem")}}}

#: verb -> (the body's component schema, what it does).
_COMMANDS: dict[str, tuple[str, str]] = {
    "start": ("LongTaskNoteBody", "Queues a planned task for its first attempt."),
    "pause": (
        "LongTaskNoteBody",
        "Pauses the task: its live attempt's run is cancelled; nothing continues by itself.",
    ),
    "resume": ("LongTaskNoteBody", "Resumes a paused task: it is queued for a new attempt."),
    "cancel": (
        "LongTaskNoteBody",
        "Cancels the task for good: no continuation ever starts again.",
    ),
    "clearRecovery": (
        "ClearRecoveryBody",
        "A person has checked a task in recovery_required: it is queued again; resolution "
        "skip (the stopped step's work is done: skipped on their word) or retry (not done: "
        "the step runs again), default go_on.",
    ),
    "continue": (
        "ContinueLongTaskBody",
        "Goes on with a finished task: a new plan version (the steps given, or the "
        "unfinished ones) and a new attempt; the terminal state is never reopened. A "
        "cancelled task cannot continue.",
    ),
    "revisePlan": (
        "RevisePlanBody",
        "A new plan version (steps and/or criteria, and the goal and/or the constraints "
        "with revise_constraints); completed steps keep their evidence.",
    ),
    "answer": (
        "AnswerDecisionBody",
        "Answers an open decision or approval, once (a question takes any non-empty "
        "answer, the other kinds one of the offered answers).",
    ),
    "editCriterion": (
        "EditCriterionBody",
        "Waives (waive) or rewords (text) one acceptance criterion: a new plan version "
        "authored by the caller; the edit survives later versions.",
    ),
    "scheduleContinuation": (
        "ScheduleContinuationBody",
        "Schedules the next attempt of a task with no live attempt for later (at a time, or "
        "the next window of a cron or interval): planned is queued, paused resumed, and the "
        "task waits until the continuation is due; missed times past the catch-up window are "
        "reported, never replayed. 400 INVALID_CONTINUATION when it cannot be used.",
    ),
}


def _one(
    operation_id: str,
    summary: str,
    description: str,
    response: Schema,
    *,
    extra: tuple[Schema, ...] = (),
    body: str = "",
    errors: tuple[str, ...] = ("400", "401", "404", "503"),
) -> tuple[Operation, ...]:
    """One operation on one long task (its project and id in the path)."""
    return (
        Operation(
            operation_id=operation_id,
            summary=summary,
            description=description,
            parameters=(PROJECT, LONG_TASK, *extra),
            body=body,
            body_required=bool(body),
            responses={"200": response, **problems(*errors)},
        ),
    )


def _command(verb: str) -> Entry:
    body, description = _COMMANDS[verb]
    return Entry(
        "POST",
        f"{ONE_LONG_TASK}:{verb}",
        long_tasks.COMMAND_HANDLERS[verb],
        _one(
            f"{verb}_long_task",
            f"{verb} a long task",
            f"{description} The body's etag is the task's as read before: a stale one is "
            "409 LONG_TASK_VERSION_CONFLICT, a move the rules refuse 409 "
            "INVALID_LONG_TASK_TRANSITION (nothing changes either way).",
            json_response(f"the task after {verb}", "LongTask", ("ETag",)),
            body=body,
            errors=("400", "401", "404", "409", "413", "503"),
        ),
    )


LONG_TASK_ROUTES: tuple[Entry, ...] = (
    Entry(
        "GET",
        f"{LONG_TASKS}:stream",
        long_task_stream.stream_long_tasks,
        (
            Operation(
                operation_id="stream_long_tasks",
                summary="stream long tasks",
                description="The project's long tasks as Server-Sent Events: first every "
                "active task and every task finished in the last 24 hours, then each task "
                "again whenever its etag moves (the whole task, as GET returns it). Not "
                "resumable: a reconnect starts again from the current state.",
                parameters=(PROJECT, ACCESS_TOKEN),
                responses={
                    "200": {
                        "description": "text/event-stream: `event: long_task`, `data: LongTask`",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "403": {
                        "description": "the token does not see this project",
                        "content": _PROBLEM_CONTENT,
                    },
                    **problems("401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        LONG_TASKS,
        long_tasks.list_long_tasks,
        (
            Operation(
                operation_id="list_long_tasks",
                summary="list long tasks",
                description="Newest first, without their steps, criteria, decisions and "
                "attempts. A project the token does not see is empty.",
                parameters=(
                    PROJECT,
                    param("owner_id", "query", "only this owner's tasks"),
                    param(
                        "active_only",
                        "query",
                        "true: only tasks not yet terminal",
                        {"type": "boolean"},
                    ),
                    param(
                        "page_size",
                        "query",
                        "maximum tasks per page; 0 = 50, at most 200",
                        {"type": "integer", "minimum": 0, "maximum": 200},
                    ),
                    PAGE_TOKEN,
                ),
                responses={
                    "200": json_response("a page of long tasks", "ListLongTasksResponse"),
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "POST",
        LONG_TASKS,
        long_tasks.create_long_task,
        (
            Operation(
                operation_id="create_long_task",
                summary="create a long task",
                description="The body is a LongTaskDraft (goal, owner, constraints, the "
                "steps with their side-effect classes, the acceptance criteria, the "
                "budget) plus start: true to queue it at once (else it stays planned). "
                "project_id is the path's. A request, never read back as state.",
                parameters=(PROJECT,),
                body="CreateLongTaskBody",
                body_required=True,
                responses={
                    "201": json_response("created", "LongTask", ("ETag", "Location")),
                    "403": {
                        "description": "the token may not act in this project",
                        "content": _PROBLEM_CONTENT,
                    },
                    **problems("400", "401", "409", "413", "503"),
                },
            ),
        ),
    ),
    Entry(
        "POST",
        f"{LONG_TASKS}:act",
        long_tasks.act_on_long_task,
        (
            Operation(
                operation_id="act_on_long_task",
                summary="act on a long task (the one action contract)",
                description="pause, resume, cancel, continue, answer, approve or deny the task "
                "named by its id or its owner's short handle (#3: owner_id's, else the "
                "caller's own), with the etag it was chosen at (empty: as it is now) and a "
                "one-time action_id: a repeated action_id answers outcome already_done and "
                "acts no second time; the same action_id for another action is 400 "
                "REQUEST_ID_REUSED. A stale etag is 409 LONG_TASK_VERSION_CONFLICT; a task of "
                "a project the token does not see, or a handle naming none, is 404.",
                parameters=(PROJECT,),
                body="ActBody",
                body_required=True,
                responses={
                    "200": json_response("what the action did", "ActResponse", ("ETag",)),
                    **problems("400", "401", "404", "409", "413", "503"),
                },
            ),
        ),
    ),
    Entry(
        "POST",
        f"{LONG_TASKS}:text",
        long_tasks.text_command,
        (
            Operation(
                operation_id="long_task_text_command",
                summary="a chat message about long tasks",
                description="For chat surfaces without buttons: /longtask <action> <#handle> "
                "[version], /longtask answer <#handle> [v<version>] <answer>, /longtask list, "
                "or a short answer (yes, grant, done, ...) taken only when exactly one "
                "decision of owner_id is open; with several open the reply lists them and "
                "nothing is done. A refused action is a reply with its stable reason in "
                "refusal; nothing changes.",
                parameters=(PROJECT,),
                body="TextCommandBody",
                body_required=True,
                responses={
                    "200": json_response("the reply", "TextCommandResponse"),
                    "403": {
                        "description": "the token may not act in this project",
                        "content": _PROBLEM_CONTENT,
                    },
                    **problems("400", "401", "413", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        ONE_LONG_TASK,
        long_tasks.get_long_task,
        _one(
            "get_long_task",
            "get a long task",
            "Its state (stored and as people read it, with the wait kind), steps with their "
            "intents, receipts and evidence, criteria with their results, decisions, plan "
            "versions and attempts. The ETag is what every command sends back.",
            json_response("the long task", "LongTask", ("ETag",)),
        ),
    ),
    *(_command(verb) for verb in _COMMANDS),
    Entry(
        "GET",
        f"{ONE_LONG_TASK}/events",
        long_tasks.list_long_task_events,
        _one(
            "list_long_task_events",
            "list a long task's events",
            "The task's append-only log, oldest first, in words: state changes, steps, "
            "intents, receipts, decisions, plan versions.",
            json_response("events", "ListLongTaskEventsResponse"),
            extra=(AFTER_SEQUENCE, LONG_TASK_PAGE_SIZE),
        ),
    ),
    Entry(
        "GET",
        f"{ONE_LONG_TASK}/export",
        long_tasks.export_long_task,
        _one(
            "export_long_task",
            "export a long task as Markdown or HTML",
            "A report for people (goal, state, criteria and evidence, steps with their "
            "receipts, decisions, plan versions). An export: never read back as state.",
            {
                "description": "the report",
                "content": {
                    "text/markdown": {"schema": {"type": "string"}},
                    "text/html": {"schema": {"type": "string"}},
                },
            },
            extra=(EXPORT_FORMAT,),
        ),
    ),
)
