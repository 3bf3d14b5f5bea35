"""gRPC messages <-> JSON bodies: proto3 JSON with the proto field names, enums by name.

Fields without presence are always written (a 0, "" or [] is shown, not omitted), so a
client never has to know proto defaults; int64 fields are strings, as proto3 JSON says.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from gateway.problems import Problem
from kernel import json_bounds

#: How deep a request body may nest: the deepest a value a door accepts (the depth setting's
#: ceiling) plus the request's own wrapping (a CreateRun body's ``spec``, a long task's
#: steps). The services, which know the setting, refuse anything deeper than it.
GATEWAY_MAX_DEPTH = json_bounds.RENDER_DEPTH

M = TypeVar("M", bound=Message)


def to_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(
        message,
        always_print_fields_with_no_presence=True,
        preserving_proto_field_name=True,
    )


def to_json(message: Message) -> str:
    return json.dumps(to_dict(message), separators=(",", ":"), ensure_ascii=False)


def parse_object(body: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; empty = {}. Its nesting is measured on
    the text before it is parsed (kernel/json_bounds.py): a body nested thousands deep is a
    400 problem, never a RecursionError of the parser (docs/gateway.md "Errors"). The
    services judge the values themselves against every input bound; the gateway only
    refuses what no door accepts."""
    if not body.strip():
        return {}
    depth = json_bounds.nesting_depth(body)
    if depth > GATEWAY_MAX_DEPTH:
        violation = json_bounds.Violation(json_bounds.DEPTH, GATEWAY_MAX_DEPTH, depth)
        raise Problem(
            400,
            "INPUT_OUT_OF_BOUNDS",
            violation.describe("the body"),
            {"limit": violation.limit, "setting": violation.setting},
        )
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Problem(400, "INVALID_ARGUMENT", f"the body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise Problem(400, "INVALID_ARGUMENT", "the body must be a JSON object")
    return document


def from_dict(document: dict[str, Any], message: M) -> M:
    try:
        json_format.ParseDict(document, message)
    except (json_format.ParseError, TypeError, ValueError, RecursionError) as exc:
        raise Problem(400, "INVALID_ARGUMENT", f"invalid body: {exc}") from None
    return message
