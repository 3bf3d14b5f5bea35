"""The gateway's own answers: liveness, the OpenAPI document (both without a token), and the
problem for a path or method no route serves."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.http import JSON, error_response, json_response
from gateway.problems import Problem
from gateway.routes.common import context


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def openapi_document(request: Request) -> Response:
    return Response(context(request).openapi, media_type=JSON)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's 404 and 405 (no route, or not this method) as problems."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return error_response(Problem(405, "METHOD_NOT_ALLOWED", "method not allowed here"))
    return error_response(Problem(exc.status_code, "NOT_FOUND", "no such resource"))
