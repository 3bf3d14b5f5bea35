"""The route table's entries for schedules (gateway/routes/schedules.py), appended to
``ROUTES`` (gateway/routes/__init__.py): every ScheduleService RPC as a REST resource, the
runs of a schedule, and the webhook delivery, the one route authenticated by a signature
instead of a token (``signed=True``: documented with ``security: []``)."""

from __future__ import annotations

from gateway.routes import schedules, webhooks
from gateway.routes.spec import (
    PAGE_TOKEN,
    PROJECT,
    SCHEDULE,
    SCHEDULE_PAGE_SIZE,
    UPCOMING_COUNT,
    Entry,
    Handler,
    Operation,
    Schema,
    json_response,
    param,
    problems,
    ref,
)

SCHEDULES = "/v1/projects/{project}/schedules"
ONE_SCHEDULE = f"{SCHEDULES}/{{schedule}}"
_SCHEDULE_IF_MATCH = param(
    "If-Match", "header", "the schedule's ETag; a stale one fails with 409 (* = no condition)"
)


def _schedule_op(
    operation_id: str,
    summary: str,
    description: str,
    response: Schema,
    *,
    status: str = "200",
    extra: tuple[Schema, ...] = (),
    body: str = "",
    body_required: bool = False,
    errors: tuple[str, ...] = ("400", "401", "404", "503"),
) -> tuple[Operation, ...]:
    """One operation on one schedule (its project and id in the path)."""
    return (
        Operation(
            operation_id=operation_id,
            summary=summary,
            description=description,
            parameters=(PROJECT, SCHEDULE, *extra),
            body=body,
            body_required=body_required,
            responses={status: response, **problems(*errors)},
        ),
    )


def _schedule_command(
    verb: str, handler: Handler, body: str, description: str, response: str
) -> Entry:
    """``POST .../schedules/{schedule}:<verb>``."""
    return Entry(
        "POST",
        f"{ONE_SCHEDULE}:{verb}",
        handler,
        _schedule_op(
            f"{verb}_schedule",
            f"{verb} a schedule",
            description,
            json_response(
                f"the result of {verb}",
                response,
                ("ETag",) if response == "Schedule" else (),
            ),
            extra=(param("Idempotency-Key", "header", "the fire's request id"),)
            if verb == "fire"
            else (),
            body=body,
            body_required=verb == "backfill",
            errors=("400", "401", "404", "409", "413", "503"),
        ),
    )


_DELIVERY_HEADERS = (
    {
        **param(
            "X-Truerun-Delivery",
            "header",
            "the delivery's id, unique per delivery: the run's idempotency key, so the same "
            "delivery sent again returns the same run",
        ),
        "required": True,
    },
    {
        **param(
            "X-Truerun-Signature",
            "header",
            "t=<unix ms>,v1=<hex HMAC-SHA256 over '<t>.<delivery id>.<body>', keyed with the "
            "schedule's webhook secret>; t within 5 minutes of the server's clock",
        ),
        "required": True,
    },
)
_PROBLEM_CONTENT = {"application/problem+json": {"schema": {"$ref": ref("Problem")}}}

SCHEDULE_ROUTES: tuple[Entry, ...] = (
    Entry(
        "GET",
        "/v1/schedules",
        schedules.list_all_schedules,
        (
            Operation(
                operation_id="list_all_schedules",
                summary="list the schedules of every project the token sees",
                parameters=(SCHEDULE_PAGE_SIZE, PAGE_TOKEN),
                responses={
                    "200": json_response("a page of schedules", "ListSchedulesResponse"),
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        SCHEDULES,
        schedules.list_schedules,
        (
            Operation(
                operation_id="list_schedules",
                summary="list schedules",
                description="By id. A project the token does not see is empty.",
                parameters=(PROJECT, SCHEDULE_PAGE_SIZE, PAGE_TOKEN),
                responses={
                    "200": json_response("a page of schedules", "ListSchedulesResponse"),
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "POST",
        SCHEDULES,
        schedules.create_schedule,
        (
            Operation(
                operation_id="create_schedule",
                summary="create a schedule",
                description="The body is a Schedule (output-only fields are ignored); its "
                "id is schedule_id (in the body or the query). With webhook_enabled the "
                "answer carries webhook_secret, shown this once.",
                parameters=(
                    PROJECT,
                    param("schedule_id", "query", "the new schedule's id (or in the body)"),
                ),
                body="CreateScheduleBody",
                body_required=True,
                responses={
                    "201": json_response("created", "CreateScheduleResponse", ("ETag", "Location")),
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
        "GET",
        ONE_SCHEDULE,
        schedules.get_schedule,
        _schedule_op(
            "get_schedule",
            "get a schedule",
            "Its template, timing, policies and what it did last (next_fire_time, "
            "last_outcome, missed_total, buffered fires, open runs).",
            json_response("the schedule", "Schedule", ("ETag",)),
        ),
    ),
    Entry(
        "PATCH",
        ONE_SCHEDULE,
        schedules.update_schedule,
        _schedule_op(
            "update_schedule",
            "change a schedule",
            "A JSON merge patch (RFC 7396) of the Schedule: the fields given replace the "
            "current ones, objects merge, null removes. Conditional on the etag read "
            "before (If-Match, or the body's etag; one of them is required; If-Match: * is "
            "no condition): a stale one is 409 SCHEDULE_VERSION_CONFLICT. A changed timing "
            "takes effect from now.",
            json_response("the schedule after the change", "Schedule", ("ETag",)),
            extra=(_SCHEDULE_IF_MATCH,),
            body="ScheduleBody",
            body_required=True,
            errors=("400", "401", "404", "409", "413", "503"),
        ),
    ),
    Entry(
        "DELETE",
        ONE_SCHEDULE,
        schedules.delete_schedule,
        _schedule_op(
            "delete_schedule",
            "delete a schedule",
            "Its runs and events stay. If-Match makes it conditional (409 when stale).",
            {"description": "deleted"},
            status="204",
            extra=(_SCHEDULE_IF_MATCH,),
            errors=("400", "401", "404", "409", "503"),
        ),
    ),
    _schedule_command(
        "pause",
        schedules.pause_schedule,
        "PauseBody",
        "Its calendar fires nothing until resumed; the note (a person reads it) becomes "
        'pause_note ("paused by <who>: <note>").',
        "Schedule",
    ),
    _schedule_command(
        "resume",
        schedules.resume_schedule,
        "EmptyBody",
        "Fires that fell due while paused follow the catch-up window.",
        "Schedule",
    ),
    _schedule_command(
        "fire",
        schedules.fire_schedule,
        "FireBody",
        "Fires now, once per request id (body request_id or Idempotency-Key): a repeated "
        "request returns the same run. The overlap policy applies.",
        "FireResponse",
    ),
    _schedule_command(
        "rotateWebhookSecret",
        schedules.rotate_webhook_secret,
        "EmptyBody",
        "A new webhook signing secret, in this answer only (webhook_secret); the previous "
        "one stops verifying at once. Turns the webhook on if it was off.",
        "CreateScheduleResponse",
    ),
    _schedule_command(
        "backfill",
        schedules.backfill_schedule,
        "BackfillBody",
        "Fires every calendar fire time in [start_time, end_time] (at most 1000), each "
        "keyed by its fire time: a time that already has a run keeps it.",
        "FireResponse",
    ),
    Entry(
        "POST",
        f"{ONE_SCHEDULE}:deliver",
        webhooks.deliver,
        (
            Operation(
                operation_id="deliver_webhook",
                summary="deliver a webhook",
                description="No bearer token: a delivery authenticates with the "
                "schedule's HMAC signature (X-Truerun-Signature over "
                "'<t>.<delivery id>.<raw body>', keyed with the webhook_secret the "
                "schedule's creation returned), which the services check. The raw body is "
                "forwarded as sent (a JSON object becomes the run spec's webhook.payload; "
                "at most 64 KiB). The same delivery id returns the same run. A missing or "
                "bad signature, an unknown schedule and one without webhook_enabled are "
                "one and the same 401 WEBHOOK_SIGNATURE_INVALID. The answer names the "
                "runs, not the schedule.",
                parameters=(PROJECT, SCHEDULE, *_DELIVERY_HEADERS),
                request_body={
                    "required": False,
                    "content": {
                        "application/json": {"schema": {}},
                        "application/octet-stream": {
                            "schema": {"type": "string", "format": "binary"}
                        },
                    },
                },
                responses={
                    "200": json_response("the run the delivery created or found", "FireResponse"),
                    "401": {
                        "description": "missing or bad signature (WEBHOOK_SIGNATURE_INVALID)",
                        "content": _PROBLEM_CONTENT,
                    },
                    **problems("400", "409", "413", "503"),
                },
            ),
        ),
        signed=True,
    ),
    Entry(
        "GET",
        f"{ONE_SCHEDULE}/upcoming",
        schedules.list_upcoming,
        _schedule_op(
            "list_upcoming_fires",
            "list a schedule's next fire times",
            "In UTC and in the schedule's zone (local_time). Never writes.",
            json_response("the next fire times", "ListUpcomingFiresResponse"),
            extra=(UPCOMING_COUNT,),
        ),
    ),
    Entry(
        "GET",
        f"{ONE_SCHEDULE}/events",
        schedules.list_events,
        _schedule_op(
            "list_schedule_events",
            "list a schedule's events",
            "What it did, newest first, in words: fired, skipped, buffered, coalesced, "
            "missed, cancel_requested, paused, resumed, updated, ...",
            json_response("a page of events", "ListScheduleEventsResponse"),
            extra=(SCHEDULE_PAGE_SIZE, PAGE_TOKEN),
        ),
    ),
    Entry(
        "GET",
        f"{ONE_SCHEDULE}/runs",
        schedules.list_runs,
        _schedule_op(
            "list_schedule_runs",
            "list a schedule's runs",
            "The runs its fires created (the fired events' runs), newest fire first, each "
            "as GetRun shows it. A page may hold fewer than page_size runs and still have "
            "a next_page_token. A run fired again (the same request id or delivery, a "
            "backfill over fired times) is listed once per page, at its newest fire; a later "
            "page may list it again.",
            json_response("a page of runs", "ListScheduleRunsResponse"),
            extra=(
                param(
                    "page_size",
                    "query",
                    "maximum runs per page; 0 = 20, at most 100",
                    {"type": "integer", "minimum": 0, "maximum": 2147483647},
                ),
                PAGE_TOKEN,
            ),
        ),
    ),
)
