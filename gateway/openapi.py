"""The gateway's OpenAPI 3 document. Its paths are the route table's operations
(gateway/routes); its schemas are built from the proto descriptors so they are exactly what
proto3 JSON (proto field names, enums by name, fields without presence always written)
produces. ``python -m gateway.openapi`` rewrites the checked-in gateway/openapi.json; a test
fails when the two differ.
"""

from __future__ import annotations

import json
import sys

from truerun.v1 import (
    capacity_service_pb2,
    common_pb2,
    long_task_service_pb2,
    run_service_pb2,
    schedule_service_pb2,
)

from gateway.proto_schemas import message_schema
from gateway.routes import ROUTES
from gateway.routes.me import ME_SCHEMA
from gateway.routes.spec import Schema, ref

_PROBLEM: Schema = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "reason"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "reason": {"type": "string"},
        "run_id": {
            "type": "string",
            "description": "IDEMPOTENCY_KEY_REUSED only: the run the key (or request_id) "
            "already made, for a different request",
        },
    },
}

_ERRORS = {
    "400": "malformed parameters or body (reason INVALID_ARGUMENT, INVALID_CURSOR, ...)",
    "401": "missing or unknown token (UNAUTHENTICATED)",
    "404": "no such run, schedule or long task, or one of a project the token does not see "
    "(RUN_NOT_FOUND, SCHEDULE_NOT_FOUND, LONG_TASK_NOT_FOUND)",
    "409": "RUN_VERSION_CONFLICT, INVALID_RUN_TRANSITION, IDEMPOTENCY_KEY_CONFLICT, "
    "SCHEDULE_VERSION_CONFLICT, SCHEDULE_EXISTS, LONG_TASK_VERSION_CONFLICT, "
    "INVALID_LONG_TASK_TRANSITION, LONG_TASK_EXISTS, ...",
    "413": "the body exceeds the size limit (REQUEST_TOO_LARGE)",
    "422": "the Idempotency-Key (or request_id) was used before with a different request "
    "(IDEMPOTENCY_KEY_REUSED; run_id names the run it made)",
    "503": "the services are unavailable or busy; retry with backoff",
}


def document() -> Schema:
    common = common_pb2.DESCRIPTOR.message_types_by_name
    runs = run_service_pb2.DESCRIPTOR.message_types_by_name
    capacity = capacity_service_pb2.DESCRIPTOR.message_types_by_name
    schemas: dict[str, Schema] = {
        name: message_schema(common[name])
        for name in ("Actor", "Run", "Attempt", "RunEvent", "RunApproval", "ApprovalGrant")
    }
    schemas["ApprovalPolicy"] = message_schema(common["ApprovalPolicy"])
    for name in (
        "ListRunsResponse",
        "CountRunsResponse",
        "DisplayStateCount",
        "CancelRunResponse",
        "ListAttemptsResponse",
        "ListRunEventsResponse",
        "ListProjectEventsResponse",
        "ReadRunOutputResponse",
        "OutputChunk",
    ):
        schemas[name] = message_schema(runs[name])
    schemas["Occupancy"] = message_schema(capacity["Occupancy"])
    for name in ("Agent", "ListAgentsResponse", "ListRuntimesResponse", "RuntimeInstance", "Route"):
        schemas[name] = message_schema(capacity[name])
    schemas["CreateRunBody"] = message_schema(
        runs["CreateRunRequest"],
        request=True,
        omit=frozenset({"project_id", "actor"}),
        required=("owner_id", "task_id"),
        nested={"ApprovalPolicy": "ApprovalPolicyBody"},
    )
    schemas["ApprovalPolicyBody"] = message_schema(common["ApprovalPolicy"], request=True)
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
    schemas.update(_schedule_schemas())
    schemas.update(_long_task_schemas())
    schemas["Problem"] = _PROBLEM
    schemas["Me"] = ME_SCHEMA
    schemas["Health"] = {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}},
    }

    responses: dict[str, Schema] = {
        f"Problem{code}": {
            "description": text,
            "content": {"application/problem+json": {"schema": {"$ref": ref("Problem")}}},
        }
        for code, text in _ERRORS.items()
    }
    responses["ProblemDefault"] = {
        "description": "any other error",
        "content": {"application/problem+json": {"schema": {"$ref": ref("Problem")}}},
    }

    paths: dict[str, Schema] = {}
    for entry in ROUTES:
        for operation in entry.operations:
            methods = paths.setdefault(operation.path or entry.path, {})
            assert entry.method.lower() not in methods, (entry.method, entry.path)
            methods[entry.method.lower()] = operation.document(public=entry.tokenless)
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
                "ETag": {
                    "description": "the run's (or schedule's, or long task's) etag",
                    "schema": {"type": "string"},
                },
                "Location": {
                    "description": "the new run's (or schedule's, or long task's) URL",
                    "schema": {"type": "string"},
                },
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _schedule_schemas() -> dict[str, Schema]:
    """ScheduleService's messages, the bodies of its routes, and the runs page the gateway
    assembles (fired events' runs)."""
    messages = schedule_service_pb2.DESCRIPTOR.message_types_by_name
    schemas: dict[str, Schema] = {
        name: message_schema(messages[name])
        for name in (
            "Schedule",
            "RunTemplate",
            "ScheduleSpec",
            "ListSchedulesResponse",
            "CreateScheduleResponse",
            "FireResponse",
            "FiredRun",
            "ListUpcomingFiresResponse",
            "UpcomingFire",
            "ListScheduleEventsResponse",
            "ScheduleEvent",
        )
    }
    parts = {"RunTemplate": "RunTemplateBody", "ScheduleSpec": "ScheduleSpecBody"}
    schemas["RunTemplateBody"] = message_schema(
        messages["RunTemplate"], request=True, required=("owner_id", "task_id")
    )
    schemas["ScheduleSpecBody"] = message_schema(messages["ScheduleSpec"], request=True)
    schemas["CreateScheduleBody"] = message_schema(
        messages["Schedule"], request=True, required=("template",), nested=parts
    )
    schemas["CreateScheduleBody"]["description"] = (
        "A Schedule; output-only fields are ignored, project_id is the path's"
    )
    schemas["ScheduleBody"] = message_schema(messages["Schedule"], request=True, nested=parts)
    schemas["ScheduleBody"]["description"] = (
        "A JSON merge patch of the Schedule (null removes a field); output-only fields "
        "are ignored, etag is the condition"
    )
    backfill = messages["BackfillScheduleRequest"]
    schemas["BackfillBody"] = message_schema(
        backfill,
        request=True,
        omit=frozenset({"project_id", "schedule_id"}),
        required=("start_time", "end_time"),
    )
    schemas["PauseBody"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"note": {"type": "string", "maxLength": 400}},
    }
    schemas["FireBody"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"request_id": {"type": "string"}},
    }
    schemas["EmptyBody"] = {"type": "object", "additionalProperties": False, "properties": {}}
    schemas["ListScheduleRunsResponse"] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["runs", "next_page_token"],
        "properties": {
            "runs": {"type": "array", "items": {"$ref": ref("Run")}},
            "next_page_token": {"type": "string"},
        },
    }
    return schemas


def _long_task_schemas() -> dict[str, Schema]:
    """LongTaskService's messages and the bodies of its routes: a body is its request
    without the path's fields (project_id, long_task_id), etag always required."""
    messages = long_task_service_pb2.DESCRIPTOR.message_types_by_name
    schemas: dict[str, Schema] = {
        name: message_schema(messages[name])
        for name in (
            "LongTask",
            "LongTaskBudget",
            "LongTaskContinuation",
            "LongTaskStep",
            "SideEffectRecord",
            "Receipt",
            "EvidenceRef",
            "Criterion",
            "Decision",
            "PlanVersion",
            "LongTaskAttempt",
            "ListLongTasksResponse",
            "ListLongTaskEventsResponse",
            "LongTaskEvent",
            "ActResponse",
            "TextCommandResponse",
            "Notice",
            "ListNoticesResponse",
            "NoticeDelivery",
            "ListNoticeDeliveriesResponse",
            "RegisterNoticeWebhookResponse",
        )
    }
    parts = {"LongTaskBudget": "LongTaskBudgetBody"}
    schemas["LongTaskBudgetBody"] = message_schema(
        messages["LongTaskBudget"],
        request=True,
        omit=frozenset({"attempts_used", "tokens_used", "deadline"}),
    )
    schemas["ContinuationSpecBody"] = message_schema(messages["ContinuationSpec"], request=True)
    schemas["StepDraft"] = message_schema(
        messages["StepDraft"], request=True, required=("step_id", "title", "side_effect")
    )
    schemas["CriterionDraft"] = message_schema(
        messages["CriterionDraft"], request=True, required=("criterion_id", "text")
    )
    create = message_schema(
        messages["LongTaskDraft"],
        request=True,
        required=("owner_id", "goal", "steps", "criteria"),
        nested=parts,
    )
    create["properties"]["start"] = {"type": "boolean"}
    create["description"] = (
        "A LongTaskDraft and start (queue it at once); project_id, when given, is the path's"
    )
    schemas["CreateLongTaskBody"] = create
    path = frozenset({"project_id", "long_task_id"})
    for body, request, required in (
        ("LongTaskNoteBody", "PauseLongTaskRequest", ("etag",)),
        ("ClearRecoveryBody", "ClearRecoveryRequest", ("etag",)),
        ("ContinueLongTaskBody", "ContinueLongTaskRequest", ("etag", "reason")),
        ("RevisePlanBody", "RevisePlanRequest", ("etag", "reason")),
        ("AnswerDecisionBody", "AnswerDecisionRequest", ("etag", "decision_id", "answer")),
        ("EditCriterionBody", "EditCriterionRequest", ("etag", "criterion_id")),
        ("ScheduleContinuationBody", "ScheduleContinuationRequest", ("etag", "continuation")),
    ):
        schemas[body] = message_schema(
            messages[request],
            request=True,
            omit=path,
            required=required,
            nested={"ContinuationSpec": "ContinuationSpecBody"},
        )
    project = frozenset({"project_id"})
    schemas["ActBody"] = message_schema(
        messages["ActRequest"], request=True, omit=project, required=("task", "action", "action_id")
    )
    schemas["TextCommandBody"] = message_schema(
        messages["TextCommandRequest"], request=True, omit=project, required=("owner_id", "text")
    )
    schemas["RegisterNoticeWebhookBody"] = message_schema(
        messages["RegisterNoticeWebhookRequest"], request=True, omit=project, required=("url",)
    )
    return schemas


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
