"""The OpenAPI document a real gateway serves validates (issue 37: it had dangling ``$ref``s,
``ContinuationSpec`` and ``LongTaskContinuation``): every ``$ref`` in it resolves to a node of
the document itself, and the document conforms to the OpenAPI 3.0 schema (the validator
schemathesis ships, jsonschema-rs over the official OAS 3.0 JSON Schema). The store plays no
part in the document, so SQLite alone serves it."""

from __future__ import annotations

from typing import Any

import httpx
import schemathesis

from tests.support.gateway_stack import gateway_stack


def _dangling(document: dict[str, Any]) -> dict[str, list[str]]:
    """Each ``$ref`` that names no node of the document -> where it occurs."""
    found: dict[str, list[str]] = {}

    def resolves(pointer: str) -> bool:
        if not pointer.startswith("#/"):
            return False  # the document refers only to itself
        node: Any = document
        for part in pointer[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        return True

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            pointer = node.get("$ref")
            if isinstance(pointer, str) and not resolves(pointer):
                found.setdefault(pointer, []).append(where)
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}/{index}")

    walk(document, "#")
    return found


def test_the_walk_finds_a_dangling_ref() -> None:
    """The check can fail: a ref to a missing schema, or to a missing path, is reported."""
    document = {
        "components": {"schemas": {"A": {"type": "string"}}},
        "x": {"$ref": "#/components/schemas/A"},
        "y": [{"$ref": "#/components/schemas/B"}, {"$ref": "#/nowhere/A"}],
    }
    assert _dangling(document) == {
        "#/components/schemas/B": ["#/y/0"],
        "#/nowhere/A": ["#/y/1"],
    }


async def test_the_served_document_has_no_dangling_ref_and_validates(sqlite_url: str) -> None:
    async with gateway_stack(sqlite_url) as stack:
        async with httpx.AsyncClient(base_url=stack.base_url) as http:
            response = await http.get("/v1/openapi.json")
    assert response.status_code == 200, response.text
    document = response.json()
    assert _dangling(document) == {}
    schemathesis.openapi.from_dict(document).validate()  # raises on a nonconforming document
    refs = sum(1 for _ in _refs(document))
    assert refs > 100, refs  # the walk saw the document's refs, not an empty one


def _refs(node: Any) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)
