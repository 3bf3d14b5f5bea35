"""Runs: create, list, get, the commands (``POST .../runs/{run}:<verb>``) and attempts."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import common_pb2, run_service_pb2

from gateway import messages
from gateway.http import int_param, json_response
from gateway.problems import Problem
from gateway.routes import run_filters
from gateway.routes.common import (
    CALL_TIMEOUT_S,
    actor,
    body_of,
    context,
    endpoint,
    principal,
    visible_run,
)
from gateway.tokens import Principal

R = run_service_pb2
OPERATOR_VERBS = ("resolve", "fail", "pause", "resume", "requeue")
#: Every verb ``run_command`` serves.
COMMAND_VERBS = ("cancel", "approve", "retry", *OPERATOR_VERBS)
_RESOLUTIONS = {
    name.removeprefix("RESOLUTION_"): value
    for name, value in R.Resolution.items()
    if value != R.RESOLUTION_UNSPECIFIED
}


@endpoint
async def create_run(request: Request) -> Response:
    who = principal(request)
    project = request.path_params["project"]
    if not who.sees(project):
        raise Problem(403, "PERMISSION_DENIED", f"this token may not act in {project}")
    document = await body_of(request)
    for forbidden in ("project_id", "actor"):
        if forbidden in document:
            raise Problem(
                400, "INVALID_ARGUMENT", f"{forbidden} is not a body field (see the path)"
            )
    create = messages.from_dict(document, R.CreateRunRequest())
    key = request.headers.get("idempotency-key")
    if key is not None:
        if create.idempotency_key and create.idempotency_key != key:
            raise Problem(400, "INVALID_ARGUMENT", "Idempotency-Key differs from idempotency_key")
        create.idempotency_key = key
    create.project_id = project
    create.actor.CopyFrom(actor(who))
    answer = await context(request).runs.CreateRun(create, timeout=CALL_TIMEOUT_S)
    return _run_response(
        answer.run, 200 if answer.existing else 201, location=_run_path(answer.run)
    )


@endpoint
async def list_runs(request: Request) -> Response:
    who = principal(request)
    project = request.path_params["project"]
    query = request.query_params
    listing = R.ListRunsRequest(
        page_size=int_param(query.get("page_size"), "page_size"),
        page_token=query.get("page_token", ""),
    )
    run_filters.fill(listing, project, query)
    listing.display_states.extend(
        run_filters.enum_params(
            query.getlist("display_state"), common_pb2.DisplayState, "DISPLAY_STATE"
        )
    )
    if not who.sees(project):
        return json_response(messages.to_dict(R.ListRunsResponse()))
    answer = await context(request).runs.ListRuns(listing, timeout=CALL_TIMEOUT_S)
    return json_response(messages.to_dict(answer))


@endpoint
async def get_run(request: Request) -> Response:
    who = principal(request)
    params = request.path_params
    run = await visible_run(request, who, params["project"], params["run"])
    return _run_response(run, 200)


@endpoint
async def run_command(request: Request) -> Response:
    """``{target}`` is ``<run id>:<verb>``, one of COMMAND_VERBS."""
    who = principal(request)
    project = request.path_params["project"]
    run_id, _, verb = request.path_params["target"].rpartition(":")
    if verb not in COMMAND_VERBS or not run_id:
        raise Problem(404, "NOT_FOUND", "no such resource")
    document = await body_of(request)
    allowed = {"request_id", "reason"} if verb in ("cancel", *OPERATOR_VERBS) else {"request_id"}
    if verb == "resolve":
        allowed |= {"resolution", "attempt_id"}
    unknown = sorted(set(document) - allowed)
    if unknown:
        raise Problem(400, "INVALID_ARGUMENT", f"unknown body fields: {', '.join(unknown)}")
    for name, value in document.items():
        if not isinstance(value, str):
            raise Problem(400, "INVALID_ARGUMENT", f"{name} must be a string")
    run = await visible_run(request, who, project, run_id)
    etag = request.headers.get("if-match", "")
    etag = "" if etag.strip() == "*" else etag.strip()
    request_id = document.get("request_id", "")
    runs = context(request).runs
    if verb in OPERATOR_VERBS:
        operated = await _operator_command(request, verb, run, etag, document, who)
        return _run_response(operated, 200)
    if verb == "cancel":
        cancelled = await runs.CancelRun(
            R.CancelRunRequest(
                id=run_id,
                etag=etag,
                reason=document.get("reason", ""),
                request_id=request_id,
                actor=actor(who),
            ),
            timeout=CALL_TIMEOUT_S,
        )
        return json_response(messages.to_dict(cancelled), headers={"ETag": cancelled.run.etag})
    if verb == "approve":
        approved = await runs.ApproveRun(
            R.ApproveRunRequest(id=run_id, etag=etag, request_id=request_id, actor=actor(who)),
            timeout=CALL_TIMEOUT_S,
        )
        return _run_response(approved, 200)
    # RetryRun has no etag: the run it retries is terminal and never changes again, so
    # comparing with the version just read is exact.
    if etag and etag != run.etag:
        raise Problem(409, "RUN_VERSION_CONFLICT", f"run {run_id} is at {run.etag}, not {etag}")
    retried = await runs.RetryRun(
        R.RetryRunRequest(id=run_id, request_id=request_id, actor=actor(who)),
        timeout=CALL_TIMEOUT_S,
    )
    return _run_response(retried, 201, location=_run_path(retried))


async def _operator_command(
    request: Request,
    verb: str,
    run: common_pb2.Run,
    etag: str,
    document: dict[str, str],
    who: Principal,
) -> common_pb2.Run:
    """resolve/fail/pause/resume/requeue: audited, so a reason is required and the actor
    is the token's identity (as an operator)."""
    reason = document.get("reason", "").strip()
    if not reason:
        raise Problem(400, "INVALID_ARGUMENT", "reason is required: an operator command says why")
    fields: dict[str, Any] = {
        "id": run.id,
        "etag": etag,
        "reason": reason,
        "request_id": document.get("request_id", ""),
        "actor": common_pb2.Actor(type=common_pb2.ACTOR_TYPE_OPERATOR, id=who.name),
    }
    runs = context(request).runs
    if verb == "resolve":
        attempt_id = document.get("attempt_id", "")
        if attempt_id and attempt_id != run.current_attempt_id:
            raise Problem(
                409,
                "ATTEMPT_MISMATCH",
                f"attempt {attempt_id} is not run {run.id}'s current attempt",
            )
        resolution = _RESOLUTIONS.get(document.get("resolution", "").strip().upper())
        if resolution is None:
            raise Problem(
                400, "INVALID_ARGUMENT", "resolution must be succeeded, failed or not_started"
            )
        resolved: common_pb2.Run = await runs.ResolveRun(
            R.ResolveRunRequest(resolution=resolution, **fields), timeout=CALL_TIMEOUT_S
        )
        return resolved
    operated: common_pb2.Run
    if verb == "fail":
        operated = await runs.FailRun(R.FailRunRequest(**fields), timeout=CALL_TIMEOUT_S)
    elif verb == "pause":
        operated = await runs.PauseRun(R.PauseRunRequest(**fields), timeout=CALL_TIMEOUT_S)
    elif verb == "resume":
        operated = await runs.ResumeRun(R.ResumeRunRequest(**fields), timeout=CALL_TIMEOUT_S)
    else:
        operated = await runs.RequeueRun(R.RequeueRunRequest(**fields), timeout=CALL_TIMEOUT_S)
    return operated


@endpoint
async def list_attempts(request: Request) -> Response:
    who = principal(request)
    run = await visible_run(
        request, who, request.path_params["project"], request.path_params["run"]
    )
    answer = await context(request).runs.ListAttempts(
        R.ListAttemptsRequest(run_id=run.id), timeout=CALL_TIMEOUT_S
    )
    return json_response(messages.to_dict(answer))


def _run_path(run: common_pb2.Run) -> str:
    return f"/v1/projects/{run.project_id}/runs/{run.id}"


def _run_response(run: common_pb2.Run, status: int, location: str | None = None) -> Response:
    headers = {"ETag": run.etag}
    if location is not None:
        headers["Location"] = location
    return json_response(messages.to_dict(run), status, headers)
