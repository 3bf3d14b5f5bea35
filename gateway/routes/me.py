"""``GET /v1/me``: who the calling token is, from the credential alone (the dashboard says
"answered by you" with it, gateway/static/js/me.js)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.http import json_response
from gateway.routes.common import endpoint, principal
from gateway.routes.spec import Entry, Operation, problems
from gateway.routes.spec import json_response as response_spec
from gateway.tokens import ALL_PROJECTS

#: The answer's schema (gateway/openapi.py puts it in the document's components).
ME_SCHEMA: dict[str, object] = {
    "type": "object",
    "required": ["actor", "named", "all_projects", "projects", "operator"],
    "properties": {
        "actor": {"type": "string", "description": "the actor id its actions carry"},
        "named": {"type": "boolean", "description": "a person's name was configured"},
        "all_projects": {"type": "boolean"},
        "projects": {"type": "array", "items": {"type": "string"}},
        "operator": {"type": "boolean"},
    },
}


@endpoint
async def me(request: Request) -> Response:
    """The actor the token acts as (what ``answered_by``, ``created_by`` and events name),
    the projects it sees and whether it is an operator."""
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


ME_ROUTE = Entry(
    "GET",
    "/v1/me",
    me,
    (
        Operation(
            operation_id="get_me",
            summary="who the calling token is",
            description="The actor its actions are recorded as, the projects it sees "
            "(all_projects: every one) and whether it is an operator.",
            responses={"200": response_spec("the caller", "Me"), **problems("401")},
        ),
    ),
)
