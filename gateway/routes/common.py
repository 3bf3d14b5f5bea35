"""What every route module shares: the gateway's context (set on ``app.state`` at startup),
the endpoint wrapper that turns failures into problem responses, authentication, project
scoping of runs, and request bodies."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import common_pb2, run_service_pb2

from coordinator.api.credentials import bearer
from gateway import messages
from gateway.http import error_response, run_not_found
from gateway.problems import Problem, code_of, from_rpc_error
from gateway.tokens import ApiTokens, FailureLimit, Principal
from gateway.upstream import CLIENT, FORWARDED, Upstream
from kernel.proxies import TrustedProxies

if TYPE_CHECKING:
    from truerun.v1.capacity_service_pb2_grpc import CapacityServiceAsyncStub
    from truerun.v1.long_task_service_pb2_grpc import LongTaskServiceAsyncStub
    from truerun.v1.run_service_pb2_grpc import RunServiceAsyncStub
    from truerun.v1.schedule_service_pb2_grpc import (
        ScheduleServiceAsyncStub,
        WebhookServiceAsyncStub,
    )

R = run_service_pb2
CALL_TIMEOUT_S = 10.0
Handler = Callable[[Request], Awaitable[Response]]


@dataclass(slots=True)
class Context:
    """What the handlers need, on ``app.state.gateway``: ``create_app`` makes it, the
    lifespan opens ``upstream``."""

    tokens: ApiTokens
    failures: FailureLimit
    max_body_bytes: int
    heartbeat_s: float
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)
    openapi: bytes = b""  # the served document (gateway/openapi.json)
    upstream: Upstream | None = None

    @property
    def runs(self) -> RunServiceAsyncStub:
        assert self.upstream is not None, "the gateway's lifespan has not started"
        return self.upstream.runs

    @property
    def capacity(self) -> CapacityServiceAsyncStub:
        assert self.upstream is not None, "the gateway's lifespan has not started"
        return self.upstream.capacity

    @property
    def schedules(self) -> ScheduleServiceAsyncStub:
        assert self.upstream is not None, "the gateway's lifespan has not started"
        return self.upstream.schedules

    @property
    def long_tasks(self) -> LongTaskServiceAsyncStub:
        assert self.upstream is not None, "the gateway's lifespan has not started"
        return self.upstream.long_tasks

    @property
    def webhooks(self) -> WebhookServiceAsyncStub:
        assert self.upstream is not None, "the gateway's lifespan has not started"
        return self.upstream.webhooks


def context(request: Request) -> Context:
    found: Context = request.app.state.gateway
    return found


def endpoint(fn: Handler) -> Handler:
    """The handler, answering a Problem or a failed gRPC call as application/problem+json."""

    @functools.wraps(fn)
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except Problem as problem:
            return error_response(problem)
        except grpc.RpcError as error:
            return error_response(from_rpc_error(error))

    return wrapped


def client_address(request: Request) -> str:
    """The client's address: the peer, or what a trusted proxy says it forwarded
    (TRUERUN_TRUSTED_PROXIES, kernel/proxies.py). The calls made for the request vouch
    for it (gateway/upstream.py)."""
    peer = request.client.host if request.client else ""
    headers = request.headers
    found = context(request).trusted_proxies.client(
        peer, headers.getlist("forwarded"), headers.getlist("x-forwarded-for")
    )
    CLIENT.set(found)
    return found


def principal(request: Request, *, query_token: bool = False) -> Principal:
    """Who the bearer token names (401 without a valid one). The token is checked first: a
    valid one is never refused by the failure bound; a bad one past it is 429 with
    Retry-After (coordinator/api/credentials.py ``FailureLimit``). The gRPC calls made for
    this request then carry the token."""
    ctx = context(request)
    source = client_address(request)
    token = bearer(request.headers.get("authorization", ""))
    if not token and query_token:  # EventSource cannot send headers
        token = request.query_params.get("access_token", "").strip()
    who = ctx.tokens.authenticate(token)
    if who is None:
        refused = ctx.failures.refuse(source, token)
        if refused is not None:
            raise Problem(
                429, refused.reason.value, refused.message, retry_after_s=refused.retry_after_s
            )
        raise Problem(401, "UNAUTHENTICATED", "a valid bearer token is required")
    FORWARDED.set(token)  # the calls made for this request carry it
    return who


async def body_of(request: Request) -> dict[str, Any]:
    """The JSON object body (empty = {}), read up to the size limit (413 past it)."""
    return messages.parse_object(await raw_body_of(request))


async def raw_body_of(request: Request) -> bytes:
    """The body's bytes as sent, read up to the size limit (413 past it)."""
    limit = context(request).max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def visible_run(
    request: Request, who: Principal, project: str, run_id: str
) -> common_pb2.Run:
    """The run, or the same 404 a missing run gets when it belongs to another project."""
    if not who.sees(project):
        raise run_not_found(run_id)
    try:
        run = await context(request).runs.GetRun(R.GetRunRequest(id=run_id), timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as error:
        if code_of(error) == grpc.StatusCode.NOT_FOUND:
            raise run_not_found(run_id) from None
        raise
    if run.project_id != project:
        raise run_not_found(run_id)
    return run


def actor(who: Principal) -> common_pb2.Actor:
    return common_pb2.Actor(type=common_pb2.ACTOR_TYPE_API_APP, id=who.name)


def _too_large(limit: int) -> Problem:
    return Problem(413, "REQUEST_TOO_LARGE", f"the body exceeds {limit} bytes")
