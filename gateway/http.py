"""HTTP plumbing the gateway's route modules share: JSON and problem responses, query
parameters, Last-Event-ID, and Server-Sent Events responses."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.problems import Problem, problem_response

JSON = "application/json"


def json_response(
    document: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return Response(body, status_code=status, media_type=JSON, headers=headers)


#: The challenge of a refused webhook delivery: its credential is the signature header, not
#: a bearer token (docs/gateway.md "Webhook deliveries").
SIGNATURE_CHALLENGE = 'Truerun-Signature header="X-Truerun-Signature"'


def error_response(problem: Problem) -> Response:
    headers = None
    if problem.status == 401:
        signed = problem.reason == "WEBHOOK_SIGNATURE_INVALID"
        headers = {"WWW-Authenticate": SIGNATURE_CHALLENGE if signed else "Bearer"}
    return problem_response(problem, headers)


def run_not_found(run_id: str) -> Problem:
    return Problem(404, "RUN_NOT_FOUND", f"run {run_id} does not exist")


def int_param(raw: str | None, name: str, end: int = 2**31) -> int:
    """A query parameter in [0, end) (0 when absent): an int32 field unless ``end`` says
    otherwise (byte offsets are int64)."""
    if raw is None or raw == "":
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise Problem(400, "INVALID_ARGUMENT", f"{name} must be an integer") from None
    if not 0 <= value < end:
        raise Problem(400, "INVALID_ARGUMENT", f"{name} must be between 0 and {end - 1}")
    return value


def has_last_event_id(request: Request) -> bool:
    return "last-event-id" in request.headers or "last_event_id" in request.query_params


def last_event_id(request: Request) -> str:
    # A browser's automatic reconnect repeats the URL and adds the header: the header is newer.
    header = request.headers.get("last-event-id")
    if header is not None:
        return header.strip()
    return request.query_params.get("last_event_id", "").strip()


def sse_response(content: AsyncIterator[str]) -> Response:
    return StreamingResponse(
        content,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
