"""The gateway's own answers: liveness, the OpenAPI document (both without a token), who the
calling token is (``GET /v1/me``), and the problem for a path or method no route serves."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.http import JSON, error_response, json_response
from gateway.problems import Problem
from gateway.routes.common import context, endpoint, principal
from gateway.tokens import ALL_PROJECTS


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


@endpoint
async def me(request: Request) -> Response:
    """The actor the token acts as (what ``answered_by``, ``created_by`` and events name),
    the projects it sees and whether it is an operator: a surface says "by you" with it."""
    who = principal(request)
    projects = sorted(p for p in who.projects if p != ALL_PROJECTS)
    return json_response(
        {
            "actor": who.name,
            "named": who.named,
            "all_projects": who.all_projects,
            "projects": projects,
            "operator": who.operator,
        }
    )


async def openapi_document(request: Request) -> Response:
    return Response(context(request).openapi, media_type=JSON)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's 404 and 405 (no route, or not this method) as problems."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return error_response(Problem(405, "METHOD_NOT_ALLOWED", "method not allowed here"))
    return error_response(Problem(exc.status_code, "NOT_FOUND", "no such resource"))
