"""JSON schemas of proto messages, exactly as proto3 JSON writes and reads them (proto field
names, enums by name, 64-bit integers as strings, fields without presence always written):
the schemas of gateway/openapi.json are built from the descriptors with these.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from gateway.routes.spec import Schema, ref

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


def _field_schema(
    field: FieldDescriptor, *, request: bool, nested: Mapping[str, str] | None = None
) -> Schema:
    schema: Schema
    if field.message_type is not None:
        full_name = field.message_type.full_name
        name = (nested or {}).get(field.message_type.name, field.message_type.name)
        schema = dict(_WELL_KNOWN.get(full_name) or {"$ref": ref(name)})
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


def message_schema(
    descriptor: Descriptor,
    *,
    request: bool = False,
    omit: frozenset[str] = frozenset(),
    required: tuple[str, ...] = (),
    nested: Mapping[str, str] | None = None,
) -> Schema:
    """``nested`` names the component a message field refers to when it is not the
    message's own name (a request body's parts: ``{"RunTemplate": "RunTemplateBody"}``)."""
    properties = {
        f.name: _field_schema(f, request=request, nested=nested)
        for f in descriptor.fields
        if f.name not in omit
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
