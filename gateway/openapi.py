"""The gateway's OpenAPI 3 document, built from the proto descriptors so the JSON schemas are
exactly what proto3 JSON (proto field names, enums by name, fields without presence always
written) produces. ``python -m gateway.openapi`` rewrites the checked-in gateway/openapi.json;
a test fails when the two differ.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from truerun.v1 import capacity_service_pb2, common_pb2, run_service_pb2

Schema = dict[str, Any]

_INT32 = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_FIXED32,
}
_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_SFIXED64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_FIXED64,
}
_WELL_KNOWN: dict[str, Schema] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?s$"},
    "google.protobuf.Struct": {"type": "object", "additionalProperties": True},
}


def _field_schema(field: FieldDescriptor, *, request: bool) -> Schema:
    schema: Schema
    if field.message_type is not None:
        full_name = field.message_type.full_name
        schema = dict(_WELL_KNOWN.get(full_name) or {"$ref": _ref(field.message_type.name)})
    elif field.enum_type is not None:
        schema = {"type": "string", "enum": [v.name for v in field.enum_type.values]}
    elif field.type in _INT32:
        schema = {"type": "integer", "format": "int32"}
    elif field.type in _INT64:
        # proto3 JSON writes 64-bit integers as strings and reads either form.
        text: Schema = {"type": "string", "pattern": "^-?[0-9]+$", "format": "int64"}
        schema = {"oneOf": [{"type": "integer"}, text]} if request else text
    elif field.type == FieldDescriptor.TYPE_BOOL:
        schema = {"type": "boolean"}
    elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        schema = {"type": "number"}
    else:
        schema = {"type": "string"}
    if field.is_repeated:
        return {"type": "array", "items": schema}
    return schema


def _ref(name: str) -> str:
    return f"#/components/schemas/{name}"


def message_schema(
    descriptor: Descriptor,
    *,
    request: bool = False,
    omit: frozenset[str] = frozenset(),
    required: tuple[str, ...] = (),
) -> Schema:
    properties = {
        f.name: _field_schema(f, request=request) for f in descriptor.fields if f.name not in omit
    }
    if request:
        must = list(required)
    else:
        # Written even at their default value: everything without presence.
        must = [
            f.name
            for f in descriptor.fields
            if f.name not in omit and (f.is_repeated or not f.has_presence)
        ]
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if must:
        schema["required"] = must
    return schema


_PROBLEM: Schema = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "reason"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "reason": {"type": "string"},
    },
}

_ERRORS = {
    "400": "malformed parameters or body (reason INVALID_ARGUMENT, INVALID_CURSOR, ...)",
    "401": "missing or unknown token (UNAUTHENTICATED)",
    "404": "no such run, or a run of a project the token does not see (RUN_NOT_FOUND)",
    "409": "RUN_VERSION_CONFLICT, INVALID_RUN_TRANSITION, IDEMPOTENCY_KEY_CONFLICT, ...",
    "413": "the body exceeds the size limit (REQUEST_TOO_LARGE)",
    "503": "the services are unavailable or busy; retry with backoff",
}


def _problems(*codes: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        code: {"$ref": f"#/components/responses/Problem{code}"} for code in codes
    }
    out["default"] = {"$ref": "#/components/responses/ProblemDefault"}
    return out


def _json_response(description: str, schema: str, headers: tuple[str, ...] = ()) -> Schema:
    response: Schema = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _ref(schema)}}},
    }
    if headers:
        response["headers"] = {h: {"$ref": f"#/components/headers/{h}"} for h in headers}
    return response


def _param(name: str, where: str, description: str, schema: Schema | None = None) -> Schema:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": schema or {"type": "string"},
    }


_PROJECT = _param("project", "path", "the project id")
_RUN = _param("run", "path", "the run id")
_PAGE_SIZE = _param(
    "page_size",
    "query",
    "maximum items per page; 0 = server default",
    {"type": "integer", "minimum": 0, "maximum": 2147483647},
)
_PAGE_TOKEN = _param("page_token", "query", "next_page_token of the previous page")
_IF_MATCH = _param("If-Match", "header", "the run's ETag; a stale one fails with 409")
_ACCESS_TOKEN = _param(
    "access_token", "query", "the bearer token, for EventSource (which cannot send headers)"
)
_ATTEMPT_ID = _param("attempt_id", "query", "one attempt of the run; empty = the current one")
_OFFSET = _param(
    "offset",
    "query",
    "where to start, in bytes of the attempt's stored output (a next_offset)",
    {"type": "integer", "minimum": 0, "maximum": 9223372036854775807},
)
_MAX_BYTES = _param(
    "max_bytes",
    "query",
    "at most this many bytes of text; 0 = 64 KiB, at most 1 MiB",
    {"type": "integer", "minimum": 0, "maximum": 2147483647},
)
_LAST_EVENT_ID = _param("Last-Event-ID", "header", "the id of the last message received")


def _stream(
    summary: str,
    description: str,
    extra: list[Schema],
    messages: str = "`id`, `event: run_event`, `data: RunEvent`",
) -> Schema:
    return {
        "get": {
            "summary": summary,
            "description": description,
            "operationId": summary.replace(" ", "_"),
            "parameters": [
                _PROJECT,
                *extra,
                _LAST_EVENT_ID,
                _param("last_event_id", "query", "Last-Event-ID for a first connect"),
                _ACCESS_TOKEN,
            ],
            "responses": {
                "200": {
                    "description": f"text/event-stream: {messages}",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **_problems("400", "401", "404", "503"),
            },
        }
    }


_OPERATOR_COMMANDS = (
    (
        "resolve",
        "Resolves an unknown or lost attempt as succeeded, failed or not started "
        "(not started: the run is queued again on a new attempt).",
    ),
    ("fail", "Fails a run that never started: queued, paused or dead-lettered."),
    ("pause", "Takes a queued run out of the queue; a paused run is never claimed."),
    ("resume", "Puts a paused run back in the queue, in its old place."),
    ("requeue", "Puts a dead-lettered run back in the queue; its recovery count restarts."),
)


def _command(
    verb: str,
    body: str,
    response: str,
    status: str,
    description: str,
    *,
    body_required: bool = False,
) -> Schema:
    return {
        "post": {
            "summary": f"{verb} a run",
            "description": description,
            "operationId": f"{verb}_run",
            "parameters": [_PROJECT, _RUN, _IF_MATCH],
            "requestBody": {
                "required": body_required,
                "content": {"application/json": {"schema": {"$ref": _ref(body)}}},
            },
            "responses": {
                status: _json_response(f"the run after {verb}", response, ("ETag",)),
                **_problems("400", "401", "404", "409", "413", "503"),
            },
        }
    }


def document() -> Schema:
    common = common_pb2.DESCRIPTOR.message_types_by_name
    runs = run_service_pb2.DESCRIPTOR.message_types_by_name
    capacity = capacity_service_pb2.DESCRIPTOR.message_types_by_name
    schemas: dict[str, Schema] = {
        name: message_schema(common[name]) for name in ("Actor", "Run", "Attempt", "RunEvent")
    }
    for name in (
        "ListRunsResponse",
        "CancelRunResponse",
        "ListAttemptsResponse",
        "ListRunEventsResponse",
        "ListProjectEventsResponse",
        "ReadRunOutputResponse",
        "OutputChunk",
    ):
        schemas[name] = message_schema(runs[name])
    schemas["Occupancy"] = message_schema(capacity["Occupancy"])
    schemas["Agent"] = message_schema(capacity["Agent"])
    schemas["CreateRunBody"] = message_schema(
        runs["CreateRunRequest"],
        request=True,
        omit=frozenset({"project_id", "actor"}),
        required=("owner_id", "task_id"),
    )
    schemas["CancelBody"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"reason": {"type": "string"}, "request_id": {"type": "string"}},
    }
    schemas["CommandBody"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"request_id": {"type": "string"}},
    }
    reason = {"type": "string", "minLength": 1, "pattern": r"\S"}
    schemas["OperatorBody"] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["reason"],
        "properties": {"reason": reason, "request_id": {"type": "string"}},
    }
    schemas["ResolveBody"] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["reason", "resolution"],
        "properties": {
            "reason": reason,
            "request_id": {"type": "string"},
            "resolution": {"type": "string", "enum": ["succeeded", "failed", "not_started"]},
            "attempt_id": {
                "type": "string",
                "description": "when set, the run's current attempt must be this one (else 409)",
            },
        },
    }
    schemas["Problem"] = _PROBLEM
    schemas["Health"] = {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}},
    }

    responses: dict[str, Schema] = {
        f"Problem{code}": {
            "description": text,
            "content": {"application/problem+json": {"schema": {"$ref": _ref("Problem")}}},
        }
        for code, text in _ERRORS.items()
    }
    responses["ProblemDefault"] = {
        "description": "any other error",
        "content": {"application/problem+json": {"schema": {"$ref": _ref("Problem")}}},
    }

    status_filter = _param(
        "status",
        "query",
        "stored statuses (RUN_STATUS_QUEUED or queued; repeat or comma-separate)",
        {"type": "array", "items": {"type": "string"}},
    )
    status_filter["explode"] = True
    display_filter = _param(
        "display_state",
        "query",
        "display states (DISPLAY_STATE_RUNNING or running; repeat or comma-separate)",
        {"type": "array", "items": {"type": "string"}},
    )
    display_filter["explode"] = True

    paths: dict[str, Schema] = {
        "/healthz": {
            "get": {
                "summary": "liveness",
                "operationId": "healthz",
                "security": [],
                "responses": {"200": _json_response("the gateway serves", "Health")},
            }
        },
        "/v1/projects/{project}/runs": {
            "post": {
                "summary": "create a run",
                "description": "201 with the new run, or 200 with the run an Idempotency-Key "
                "already names.",
                "operationId": "create_run",
                "parameters": [
                    _PROJECT,
                    _param("Idempotency-Key", "header", "makes creation idempotent per project"),
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": _ref("CreateRunBody")}}},
                },
                "responses": {
                    "201": _json_response("created", "Run", ("ETag", "Location")),
                    "200": _json_response("the existing run", "Run", ("ETag", "Location")),
                    "403": {
                        "description": "the token may not act in this project",
                        "content": {
                            "application/problem+json": {"schema": {"$ref": _ref("Problem")}}
                        },
                    },
                    **_problems("400", "401", "409", "413", "503"),
                },
            },
            "get": {
                "summary": "list runs",
                "description": "Newest first. A project the token does not see is empty.",
                "operationId": "list_runs",
                "parameters": [
                    _PROJECT,
                    _param("owner_id", "query", "only this owner's runs"),
                    _param("agent_id", "query", "only this agent's runs"),
                    status_filter,
                    display_filter,
                    _PAGE_SIZE,
                    _PAGE_TOKEN,
                ],
                "responses": {
                    "200": _json_response("a page of runs", "ListRunsResponse"),
                    **_problems("400", "401", "503"),
                },
            },
        },
        "/v1/projects/{project}/runs/{run}": {
            "get": {
                "summary": "get a run",
                "operationId": "get_run",
                "parameters": [_PROJECT, _RUN],
                "responses": {
                    "200": _json_response("the run", "Run", ("ETag",)),
                    **_problems("400", "401", "404", "503"),
                },
            }
        },
        "/v1/projects/{project}/runs/{run}:cancel": _command(
            "cancel",
            "CancelBody",
            "CancelRunResponse",
            "200",
            "Cancelled at once before the start fence; after it a durable cancel request "
            "(the run shows cancelling until the runtime confirms).",
        ),
        "/v1/projects/{project}/runs/{run}:approve": _command(
            "approve", "CommandBody", "Run", "200", "Approves a run that waits for approval."
        ),
        "/v1/projects/{project}/runs/{run}:retry": _command(
            "retry",
            "CommandBody",
            "Run",
            "201",
            "Creates a new run retrying a terminal one; the original never changes.",
        ),
        **{
            f"/v1/projects/{{project}}/runs/{{run}}:{verb}": _command(
                verb,
                "ResolveBody" if verb == "resolve" else "OperatorBody",
                "Run",
                "200",
                f"Operator command (audited: the token's identity and the reason are recorded). "
                f"{description}",
                body_required=True,
            )
            for verb, description in _OPERATOR_COMMANDS
        },
        "/v1/projects/{project}/runs/{run}/attempts": {
            "get": {
                "summary": "list a run's attempts",
                "operationId": "list_attempts",
                "parameters": [_PROJECT, _RUN],
                "responses": {
                    "200": _json_response("every attempt, oldest first", "ListAttemptsResponse"),
                    **_problems("400", "401", "404", "503"),
                },
            }
        },
        "/v1/projects/{project}/runs/{run}/events": {
            "get": {
                "summary": "list a run's events",
                "operationId": "list_run_events",
                "parameters": [
                    _PROJECT,
                    _RUN,
                    _param(
                        "after_sequence",
                        "query",
                        "only events with a greater sequence",
                        {"type": "integer", "minimum": 0, "maximum": 2147483647},
                    ),
                    _PAGE_SIZE,
                    _PAGE_TOKEN,
                ],
                "responses": {
                    "200": _json_response("a page of events", "ListRunEventsResponse"),
                    **_problems("400", "401", "404", "503"),
                },
            }
        },
        "/v1/projects/{project}/runs/{run}/events:stream": _stream(
            "stream run events",
            "The run's committed events from after Last-Event-ID (a sequence), then new "
            "ones as they commit. Message ids are the events' sequences.",
            [_RUN],
        ),
        "/v1/projects/{project}/runs/{run}/output": {
            "get": {
                "summary": "read a run's output",
                "description": "A page of an attempt's stored output (redacted, capped), from "
                "the output store: output is not in the event log. Offsets are bytes of the "
                "attempt's UTF-8 text; to follow, ask again from next_offset. Without "
                "attempt_id: the run's current attempt.",
                "operationId": "read_run_output",
                "parameters": [_PROJECT, _RUN, _ATTEMPT_ID, _OFFSET, _MAX_BYTES],
                "responses": {
                    "200": _json_response("a page of output", "ReadRunOutputResponse"),
                    **_problems("400", "401", "404", "503"),
                },
            }
        },
        "/v1/projects/{project}/runs/{run}/output:stream": _stream(
            "stream run output",
            "Follows a run's output until the run ends. Without attempt_id it reads the "
            "current attempt and moves on to each later one (the rest of the old one "
            "first). Resumes from Last-Event-ID (`<attempt_id>:<offset>`, every message's "
            "id) or from attempt_id and offset.",
            [_RUN, _ATTEMPT_ID, _OFFSET],
            "`event: attempt` (`data: {attempt_id, attempt_no}`) when an attempt begins, "
            "`event: output` (`data: {attempt_id, attempt_no, offset, text, kind}`) per "
            "chunk, `id: <attempt_id>:<offset after it>`, and `event: end` once the run "
            "ended and everything was sent; then the stream closes",
        ),
        "/v1/projects/{project}/events": {
            "get": {
                "summary": "list project events",
                "operationId": "list_project_events",
                "parameters": [
                    _PROJECT,
                    _param("after_cursor", "query", "a cursor the server returned"),
                    _PAGE_SIZE,
                ],
                "responses": {
                    "200": _json_response("a page of events", "ListProjectEventsResponse"),
                    **_problems("400", "401", "503"),
                },
            }
        },
        "/v1/projects/{project}/events:stream": _stream(
            "stream project events",
            "Every committed event of the project, in cursor order, from after "
            "Last-Event-ID (a cursor), then new ones. Message ids are the events' cursors. "
            "With from=now and no Last-Event-ID: no history, only later commits; the first "
            "message is a bare id (the position now) to resume from.",
            [
                _param(
                    "from",
                    "query",
                    "now: start at the current position (ignored with a Last-Event-ID)",
                    {"type": "string", "enum": ["now"]},
                )
            ],
        ),
        "/v1/capacity/owners/{owner}/instances/{instance}": {
            "get": {
                "summary": "get occupancy",
                "description": "D, O, runtime active, durable rows, the merged task set and "
                "the observation's age for one runtime instance.",
                "operationId": "get_occupancy",
                "parameters": [
                    _param("owner", "path", "the owner id"),
                    _param("instance", "path", "the runtime instance id"),
                ],
                "responses": {
                    "200": _json_response("the occupancy", "Occupancy"),
                    **_problems("400", "401", "503"),
                },
            }
        },
        "/v1/agents/{agent}": {
            "get": {
                "summary": "get an agent",
                "description": "R (concurrency) and the live attempts of one agent.",
                "operationId": "get_agent",
                "parameters": [_param("agent", "path", "the agent id")],
                "responses": {
                    "200": _json_response("the agent", "Agent"),
                    **_problems("400", "401", "404", "503"),
                },
            }
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "truerun gateway",
            "version": "1",
            "description": "REST and Server-Sent Events over truerun's gRPC API. Bodies are "
            "the gRPC messages in proto3 JSON with the proto field names. Errors are "
            "application/problem+json with a stable reason.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": responses,
            "headers": {
                "ETag": {"description": "the run's etag", "schema": {"type": "string"}},
                "Location": {"description": "the run's URL", "schema": {"type": "string"}},
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
