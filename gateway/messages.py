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
    """A request body that must be a JSON object; empty = {}."""
    if not body.strip():
        return {}
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
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
