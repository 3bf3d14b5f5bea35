"""The route table's types, and the OpenAPI pieces its entries are described with.

An ``Entry`` is one Starlette route (method, path, handler) with the OpenAPI operations it
serves: one, none (the document itself), or several when one route serves several documented
paths (``POST .../runs/{target}`` serves ``{run}:cancel``, ``{run}:pause``, ...).
gateway/app.py makes the routes from the table, gateway/openapi.py the document's paths.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

Schema = dict[str, Any]
Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Operation:
    """One OpenAPI operation: its facts, turned into the document by ``document()``."""

    operation_id: str
    summary: str
    responses: Mapping[str, Schema]
    description: str = ""
    parameters: tuple[Schema, ...] = ()
    body: str = ""  # the component schema of the JSON request body; "" = no body
    body_required: bool = False
    path: str = ""  # the documented path when it is not the route's (a run command)
    request_body: Schema | None = None  # a whole requestBody, when not one JSON schema

    def document(self, *, public: bool) -> Schema:
        operation: Schema = {"summary": self.summary, "operationId": self.operation_id}
        if self.description:
            operation["description"] = self.description
        if self.parameters:
            operation["parameters"] = list(self.parameters)
        if self.request_body is not None:
            operation["requestBody"] = self.request_body
        elif self.body:
            operation["requestBody"] = {
                "required": self.body_required,
                "content": {"application/json": {"schema": {"$ref": ref(self.body)}}},
            }
        if public:
            operation["security"] = []
        operation["responses"] = dict(self.responses)
        return operation


@dataclass(frozen=True, slots=True)
class Entry:
    """One route of the gateway and the operations it is documented as."""

    method: str
    path: str
    handler: Handler
    operations: tuple[Operation, ...] = ()
    public: bool = False  # served without a token (every other route authenticates)
    # Authenticated by a signature in its headers instead of a token (a webhook delivery):
    # documented without the bearer scheme, like a public route.
    signed: bool = False

    @property
    def tokenless(self) -> bool:
        """Whether the route is served without a bearer token (public or signed)."""
        return self.public or self.signed


def ref(name: str) -> str:
    return f"#/components/schemas/{name}"


def problems(*codes: str) -> dict[str, Any]:
    """The problem responses (components/responses) of these statuses, and the default."""
    out: dict[str, Any] = {
        code: {"$ref": f"#/components/responses/Problem{code}"} for code in codes
    }
    out["default"] = {"$ref": "#/components/responses/ProblemDefault"}
    return out


def json_response(description: str, schema: str, headers: tuple[str, ...] = ()) -> Schema:
    response: Schema = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": ref(schema)}}},
    }
    if headers:
        response["headers"] = {h: {"$ref": f"#/components/headers/{h}"} for h in headers}
    return response


def param(name: str, where: str, description: str, schema: Schema | None = None) -> Schema:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": schema or {"type": "string"},
    }


def _int_param(name: str, description: str, maximum: int = 2147483647) -> Schema:
    return param(name, "query", description, {"type": "integer", "minimum": 0, "maximum": maximum})


def _list_param(name: str, description: str) -> Schema:
    listed = param(name, "query", description, {"type": "array", "items": {"type": "string"}})
    listed["explode"] = True
    return listed


PROJECT = param("project", "path", "the project id")
IDEMPOTENCY_KEY = param(
    "Idempotency-Key",
    "header",
    "makes creation idempotent per project (the same request answers the same run)",
)
RUN = param("run", "path", "the run id")
SCHEDULE = param("schedule", "path", "the schedule id")
PAGE_SIZE = _int_param("page_size", "maximum items per page; 0 = server default")
PAGE_TOKEN = param("page_token", "query", "next_page_token of the previous page")
IF_MATCH = param("If-Match", "header", "the run's ETag; a stale one fails with 409")
ACCESS_TOKEN = param(
    "access_token", "query", "the bearer token, for EventSource (which cannot send headers)"
)
ATTEMPT_ID = param("attempt_id", "query", "one attempt of the run; empty = the current one")
OFFSET = _int_param(
    "offset",
    "where to start, in bytes of the attempt's stored output (a next_offset)",
    9223372036854775807,
)
MAX_BYTES = _int_param("max_bytes", "at most this many bytes of text; 0 = 64 KiB, at most 1 MiB")
AFTER_SEQUENCE = _int_param("after_sequence", "only events with a greater sequence")
SCHEDULE_PAGE_SIZE = _int_param("page_size", "maximum items per page; 0 = server default", 200)
UPCOMING_COUNT = _int_param("count", "how many fire times; 0 = 5", 100)
LAST_EVENT_ID = param("Last-Event-ID", "header", "the id of the last message received")
STATUS_FILTER = _list_param(
    "status", "stored statuses (RUN_STATUS_QUEUED or queued; repeat or comma-separate)"
)
_TIME = {"type": "string", "format": "date-time"}
#: The runs list's filters (gateway/routes/run_filters.py), shared by the list and the counts.
RUN_FILTERS = (
    param("owner_id", "query", "only this owner's runs"),
    param("agent_id", "query", "only this agent's runs"),
    param("task_id", "query", "only this task's runs"),
    param("create_time_from", "query", "only runs created at or after this time", _TIME),
    param("create_time_to", "query", "only runs created before this time", _TIME),
    param(
        "text",
        "query",
        "only runs whose id, task, owner, agent, trigger or error code "
        "contains this text (case-insensitive)",
    ),
    STATUS_FILTER,
)
DISPLAY_FILTER = _list_param(
    "display_state", "display states (DISPLAY_STATE_RUNNING or running; repeat or comma-separate)"
)


def stream(
    summary: str,
    description: str,
    extra: tuple[Schema, ...],
    messages: str = "`id`, `event: run_event`, `data: RunEvent`",
) -> Operation:
    """A Server-Sent Events stream (GET), resumable with Last-Event-ID."""
    return Operation(
        operation_id=summary.replace(" ", "_"),
        summary=summary,
        description=description,
        parameters=(
            PROJECT,
            *extra,
            LAST_EVENT_ID,
            param("last_event_id", "query", "Last-Event-ID for a first connect"),
            ACCESS_TOKEN,
        ),
        responses={
            "200": {
                "description": f"text/event-stream: {messages}",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            **problems("400", "401", "404", "503"),
        },
    )


def command(
    verb: str,
    body: str,
    response: str,
    status: str,
    description: str,
    *,
    body_required: bool = False,
) -> Operation:
    """``POST /v1/projects/{project}/runs/{run}:<verb>``."""
    return Operation(
        operation_id=f"{verb}_run",
        summary=f"{verb} a run",
        description=description,
        path=f"/v1/projects/{{project}}/runs/{{run}}:{verb}",
        parameters=(PROJECT, RUN, IF_MATCH),
        body=body,
        body_required=body_required,
        responses={
            status: json_response(f"the run after {verb}", response, ("ETag",)),
            **problems("400", "401", "404", "409", "413", "503"),
        },
    )
