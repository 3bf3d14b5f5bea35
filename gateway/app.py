"""The gateway: REST + Server-Sent Events over the gRPC API, and the dashboard's static files.

It holds no state and reads no database: every answer comes from RunService or
CapacityService over gRPC. A token sees only its projects; a run of another project answers
404 exactly like a missing run (same status, reason and detail), lists and streams of another
project are empty.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from truerun.v1 import (
    capacity_service_pb2,
    capacity_service_pb2_grpc,
    common_pb2,
    run_service_pb2,
    run_service_pb2_grpc,
)

from coordinator.api.bearer import bearer_interceptors
from coordinator.api.credentials import bearer
from gateway import messages
from gateway.http import (
    error_response,
    has_last_event_id,
    int_param,
    json_response,
    last_event_id,
    run_not_found,
    sse_response,
)
from gateway.output import output_routes
from gateway.problems import Problem, code_of, from_rpc_error
from gateway.sse import event_stream
from gateway.tokens import ApiTokens, FailureLimit, Principal
from gateway.tracing import TracingMiddleware
from kernel.telemetry import client_interceptors
from kernel.tls import TlsFiles, aio_channel

HERE = Path(__file__).resolve().parent
OPENAPI_PATH = HERE / "openapi.json"
STATIC_DIR = HERE / "static"
MAX_BODY_BYTES = 256 * 1024
CALL_TIMEOUT_S = 10.0
JSON = "application/json"

R = run_service_pb2
OPERATOR_VERBS = ("resolve", "fail", "pause", "resume", "requeue")
_RESOLUTIONS = {
    name.removeprefix("RESOLUTION_"): value
    for name, value in R.Resolution.items()
    if value != R.RESOLUTION_UNSPECIFIED
}
Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    grpc_target: str
    tokens: ApiTokens
    # CapacityService's address when it is served apart (`truerun capacity`); "" = grpc_target.
    capacity_target: str = ""
    max_body_bytes: int = MAX_BODY_BYTES
    heartbeat_s: float = 15.0
    static_dir: Path | None = STATIC_DIR
    failures: FailureLimit | None = None  # failed authentications per client (429 past it)
    # TLS to the services: an https:// target or any of these files (kernel/tls.py)
    tls: TlsFiles = field(default_factory=TlsFiles)


#: The bearer token of the request being served: what the gRPC calls made for it carry.
_FORWARDED: ContextVar[str] = ContextVar("gateway_forwarded_token", default="")


class Upstream:
    """The gRPC stubs, on channels opened inside the server's event loop: one, or a second
    one for CapacityService when it has its own address."""

    def __init__(self, target: str, capacity_target: str = "", tls: TlsFiles | None = None) -> None:
        # Every call carries the token of the request it serves: the gateway forwards the
        # caller's identity and grants none of its own.
        interceptors = [*bearer_interceptors(_FORWARDED.get), *client_interceptors()]
        files = tls or TlsFiles()
        self.channel = aio_channel(target, files, interceptors=interceptors)
        self.capacity_channel = self.channel
        if capacity_target and capacity_target != target:
            self.capacity_channel = aio_channel(capacity_target, files, interceptors=interceptors)
        self.runs = run_service_pb2_grpc.RunServiceStub(self.channel)
        self.capacity = capacity_service_pb2_grpc.CapacityServiceStub(self.capacity_channel)

    async def close(self) -> None:
        await self.channel.close(None)
        if self.capacity_channel is not self.channel:
            await self.capacity_channel.close(None)


def create_app(config: GatewayConfig) -> Starlette:
    state: dict[str, Upstream] = {}
    failures = config.failures or FailureLimit()
    openapi = OPENAPI_PATH.read_bytes()

    def up() -> Upstream:
        return state["upstream"]

    # -- plumbing ---------------------------------------------------------------------------

    def endpoint(fn: Handler) -> Handler:
        async def wrapped(request: Request) -> Response:
            try:
                return await fn(request)
            except Problem as problem:
                return error_response(problem)
            except grpc.RpcError as error:
                return error_response(from_rpc_error(error))

        return wrapped

    def principal(request: Request, *, query_token: bool = False) -> Principal:
        source = request.client.host if request.client else ""
        if failures.blocked(source):
            raise Problem(
                429, "TOO_MANY_FAILED_AUTHENTICATIONS", "too many failed authentications; wait"
            )
        token = bearer(request.headers.get("authorization", ""))
        if not token and query_token:  # EventSource cannot send headers
            token = request.query_params.get("access_token", "").strip()
        who = config.tokens.authenticate(token)
        if who is None:
            failures.failed(source)
            raise Problem(401, "UNAUTHENTICATED", "a valid bearer token is required")
        _FORWARDED.set(token)  # the calls made for this request carry it
        return who

    async def body_of(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > config.max_body_bytes:
            raise _too_large(config.max_body_bytes)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > config.max_body_bytes:
                raise _too_large(config.max_body_bytes)
            chunks.append(chunk)
        return messages.parse_object(b"".join(chunks))

    async def visible_run(who: Principal, project: str, run_id: str) -> common_pb2.Run:
        """The run, or the same 404 a missing run gets when it belongs to another project."""
        if not who.sees(project):
            raise run_not_found(run_id)
        try:
            run = await up().runs.GetRun(R.GetRunRequest(id=run_id), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as error:
            if code_of(error) == grpc.StatusCode.NOT_FOUND:
                raise run_not_found(run_id) from None
            raise
        if run.project_id != project:
            raise run_not_found(run_id)
        return run

    def actor(who: Principal) -> common_pb2.Actor:
        return common_pb2.Actor(type=common_pb2.ACTOR_TYPE_API_APP, id=who.name)

    # -- runs -------------------------------------------------------------------------------

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
                raise Problem(
                    400, "INVALID_ARGUMENT", "Idempotency-Key differs from idempotency_key"
                )
            create.idempotency_key = key
        create.project_id = project
        create.actor.CopyFrom(actor(who))
        answer = await up().runs.CreateRun(create, timeout=CALL_TIMEOUT_S)
        return _run_response(
            answer.run, 200 if answer.existing else 201, location=_run_path(answer.run)
        )

    @endpoint
    async def list_runs(request: Request) -> Response:
        who = principal(request)
        project = request.path_params["project"]
        query = request.query_params
        listing = R.ListRunsRequest(
            project_id=project,
            owner_id=query.get("owner_id", ""),
            agent_id=query.get("agent_id", ""),
            page_size=int_param(query.get("page_size"), "page_size"),
            page_token=query.get("page_token", ""),
        )
        listing.statuses.extend(
            _enum_params(query.getlist("status"), common_pb2.RunStatus, "RUN_STATUS")
        )
        listing.display_states.extend(
            _enum_params(query.getlist("display_state"), common_pb2.DisplayState, "DISPLAY_STATE")
        )
        if not who.sees(project):
            return json_response(messages.to_dict(R.ListRunsResponse()))
        answer = await up().runs.ListRuns(listing, timeout=CALL_TIMEOUT_S)
        return json_response(messages.to_dict(answer))

    @endpoint
    async def get_run(request: Request) -> Response:
        who = principal(request)
        run = await visible_run(who, request.path_params["project"], request.path_params["run"])
        return _run_response(run, 200)

    @endpoint
    async def run_command(request: Request) -> Response:
        who = principal(request)
        project = request.path_params["project"]
        run_id, _, verb = request.path_params["target"].rpartition(":")
        if verb not in ("cancel", "retry", "approve", *OPERATOR_VERBS) or not run_id:
            raise Problem(404, "NOT_FOUND", "no such resource")
        document = await body_of(request)
        allowed = (
            {"request_id", "reason"} if verb in ("cancel", *OPERATOR_VERBS) else {"request_id"}
        )
        if verb == "resolve":
            allowed |= {"resolution", "attempt_id"}
        unknown = sorted(set(document) - allowed)
        if unknown:
            raise Problem(400, "INVALID_ARGUMENT", f"unknown body fields: {', '.join(unknown)}")
        for name, value in document.items():
            if not isinstance(value, str):
                raise Problem(400, "INVALID_ARGUMENT", f"{name} must be a string")
        run = await visible_run(who, project, run_id)
        etag = request.headers.get("if-match", "")
        etag = "" if etag.strip() == "*" else etag.strip()
        request_id = document.get("request_id", "")
        runs = up().runs
        if verb in OPERATOR_VERBS:
            operated = await operator_command(verb, run, etag, document, who)
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

    async def operator_command(
        verb: str, run: common_pb2.Run, etag: str, document: dict[str, str], who: Principal
    ) -> common_pb2.Run:
        """resolve/fail/pause/resume/requeue: audited, so a reason is required and the actor
        is the token's identity (as an operator)."""
        reason = document.get("reason", "").strip()
        if not reason:
            raise Problem(
                400, "INVALID_ARGUMENT", "reason is required: an operator command says why"
            )
        fields: dict[str, Any] = {
            "id": run.id,
            "etag": etag,
            "reason": reason,
            "request_id": document.get("request_id", ""),
            "actor": common_pb2.Actor(type=common_pb2.ACTOR_TYPE_OPERATOR, id=who.name),
        }
        runs = up().runs
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
        run = await visible_run(who, request.path_params["project"], request.path_params["run"])
        answer = await up().runs.ListAttempts(
            R.ListAttemptsRequest(run_id=run.id), timeout=CALL_TIMEOUT_S
        )
        return json_response(messages.to_dict(answer))

    # -- events -----------------------------------------------------------------------------

    @endpoint
    async def list_run_events(request: Request) -> Response:
        who = principal(request)
        query = request.query_params
        listing = R.ListRunEventsRequest(
            run_id=request.path_params["run"],
            after_sequence=int_param(query.get("after_sequence"), "after_sequence"),
            page_size=int_param(query.get("page_size"), "page_size"),
            page_token=query.get("page_token", ""),
        )
        await visible_run(who, request.path_params["project"], listing.run_id)
        answer = await up().runs.ListRunEvents(listing, timeout=CALL_TIMEOUT_S)
        return json_response(messages.to_dict(answer))

    @endpoint
    async def list_project_events(request: Request) -> Response:
        who = principal(request)
        project = request.path_params["project"]
        query = request.query_params
        listing = R.ListProjectEventsRequest(
            project_id=project,
            after_cursor=query.get("after_cursor", ""),
            page_size=int_param(query.get("page_size"), "page_size"),
        )
        if not who.sees(project):
            empty = R.ListProjectEventsResponse(next_cursor=listing.after_cursor)
            return json_response(messages.to_dict(empty))
        answer = await up().runs.ListProjectEvents(listing, timeout=CALL_TIMEOUT_S)
        return json_response(messages.to_dict(answer))

    @endpoint
    async def stream_project_events(request: Request) -> Response:
        who = principal(request, query_token=True)
        project = request.path_params["project"]
        cursor = last_event_id(request)
        start = request.query_params.get("from", "")
        if start not in ("", "now"):
            raise Problem(400, "INVALID_ARGUMENT", "from must be 'now' (or absent)")
        if not who.sees(project):
            return sse_response(event_stream(None, _cursor_of, config.heartbeat_s))
        first_id = ""
        if start == "now" and not has_last_event_id(request):
            # No replay of the history: the stream starts at the position now, which is sent
            # first as a bare id so a reconnect resumes from it even before any event.
            position = await up().runs.GetEventCursor(
                R.GetEventCursorRequest(project_id=project), timeout=CALL_TIMEOUT_S
            )
            cursor = first_id = position.cursor
        else:
            # A malformed cursor fails here, as a 400, rather than as an ended stream.
            await up().runs.ListProjectEvents(
                R.ListProjectEventsRequest(project_id=project, after_cursor=cursor, page_size=1),
                timeout=CALL_TIMEOUT_S,
            )
        call = up().runs.WatchRunEvents(
            R.WatchRunEventsRequest(project_id=project, after_cursor=cursor)
        )
        return sse_response(
            event_stream(_aiter(call), _cursor_of, config.heartbeat_s, call.cancel, first_id)
        )

    @endpoint
    async def stream_run_events(request: Request) -> Response:
        who = principal(request, query_token=True)
        raw = last_event_id(request)
        after = int_param(raw or None, "Last-Event-ID")
        run = await visible_run(who, request.path_params["project"], request.path_params["run"])
        call = up().runs.WatchRunEvents(
            R.WatchRunEventsRequest(run_id=run.id, after_sequence=after)
        )
        return sse_response(
            event_stream(_aiter(call), _sequence_of, config.heartbeat_s, call.cancel)
        )

    # -- capacity and agents ----------------------------------------------------------------

    @endpoint
    async def get_occupancy(request: Request) -> Response:
        principal(request)
        answer = await up().capacity.GetOccupancy(
            capacity_service_pb2.GetOccupancyRequest(
                owner_id=request.path_params["owner"],
                runtime_instance_id=request.path_params["instance"],
            ),
            timeout=CALL_TIMEOUT_S,
        )
        return json_response(messages.to_dict(answer))

    @endpoint
    async def get_agent(request: Request) -> Response:
        principal(request)
        answer = await up().capacity.GetAgent(
            capacity_service_pb2.GetAgentRequest(agent_id=request.path_params["agent"]),
            timeout=CALL_TIMEOUT_S,
        )
        return json_response(messages.to_dict(answer))

    # -- the rest ---------------------------------------------------------------------------

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def openapi_document(request: Request) -> Response:
        return Response(openapi, media_type=JSON)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return error_response(Problem(405, "METHOD_NOT_ALLOWED", "method not allowed here"))
        return error_response(Problem(exc.status_code, "NOT_FOUND", "no such resource"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state["upstream"] = Upstream(config.grpc_target, config.capacity_target, config.tls)
        try:
            yield
        finally:
            await state["upstream"].close()

    base = "/v1/projects/{project}"
    routes: list[Route | Mount] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/openapi.json", openapi_document, methods=["GET"]),
        Route(f"{base}/runs", create_run, methods=["POST"]),
        Route(f"{base}/runs", list_runs, methods=["GET"]),
        Route(f"{base}/runs/{{run}}", get_run, methods=["GET"]),
        Route(f"{base}/runs/{{target}}", run_command, methods=["POST"]),
        Route(f"{base}/runs/{{run}}/attempts", list_attempts, methods=["GET"]),
        Route(f"{base}/runs/{{run}}/events", list_run_events, methods=["GET"]),
        Route(f"{base}/runs/{{run}}/events:stream", stream_run_events, methods=["GET"]),
        *output_routes(
            base,
            endpoint=endpoint,
            principal=principal,
            visible_run=visible_run,
            runs=lambda: up().runs,
            heartbeat_s=config.heartbeat_s,
        ),
        Route(f"{base}/events", list_project_events, methods=["GET"]),
        Route(f"{base}/events:stream", stream_project_events, methods=["GET"]),
        Route("/v1/capacity/owners/{owner}/instances/{instance}", get_occupancy, methods=["GET"]),
        Route("/v1/agents/{agent}", get_agent, methods=["GET"]),
    ]
    if config.static_dir is not None and config.static_dir.is_dir():
        routes.append(Mount("/", StaticFiles(directory=config.static_dir, html=True)))
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
        middleware=[Middleware(TracingMiddleware, routes=routes)],
    )


# -- helpers ---------------------------------------------------------------------------------


def _run_path(run: common_pb2.Run) -> str:
    return f"/v1/projects/{run.project_id}/runs/{run.id}"


def _run_response(run: common_pb2.Run, status: int, location: str | None = None) -> Response:
    headers = {"ETag": run.etag}
    if location is not None:
        headers["Location"] = location
    return json_response(messages.to_dict(run), status, headers)


def _too_large(limit: int) -> Problem:
    return Problem(413, "REQUEST_TOO_LARGE", f"the body exceeds {limit} bytes")


def _enum_params(raw: list[str], enum: Any, prefix: str) -> list[Any]:
    """``status=queued,running`` or ``status=RUN_STATUS_QUEUED&status=...``."""
    values: list[Any] = []
    for item in (part.strip() for value in raw for part in value.split(",")):
        if not item:
            continue
        name = item.upper() if item.upper().startswith(prefix + "_") else f"{prefix}_{item.upper()}"
        try:
            values.append(int(enum.Value(name)))
        except ValueError:
            raise Problem(400, "INVALID_ARGUMENT", f"unknown {prefix.lower()}: {item}") from None
    return values


def _cursor_of(event: common_pb2.RunEvent) -> str:
    return event.cursor


def _sequence_of(event: common_pb2.RunEvent) -> str:
    return str(event.sequence)


async def _aiter(
    call: grpc.aio.UnaryStreamCall[Any, common_pb2.RunEvent],
) -> AsyncIterator[common_pb2.RunEvent]:
    async for event in call:
        yield event
