"""The route table (gateway/routes) without a live stack: every route is documented and
every documented operation is served by its route, every route but the two public ones
authenticates (with a bearer token, or the webhook delivery with its signature), metrics name
a run command by its documented path, and a handler can be called on its own."""

from __future__ import annotations

import re
from typing import Any, cast

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Match, Route
from truerun.v1 import common_pb2, run_service_pb2

from gateway.app import GatewayConfig, create_app
from gateway.metrics import COMMAND_VERBS, route_template
from gateway.openapi import document
from gateway.routes import ROUTES, runs
from gateway.routes.common import Context
from gateway.tokens import ApiTokens, FailureLimit
from gateway.upstream import FORWARDED, Upstream
from tests.support.gateway_stack import ALL, P_TOKEN, TOKENS

# The document does not describe itself; everything else is documented.
UNDOCUMENTED = {("GET", "/v1/openapi.json")}
PUBLIC = {("GET", "/healthz"), ("GET", "/v1/openapi.json")}
# Authenticated by the delivery's signature, not a token (the services check it).
SIGNED = {("POST", "/v1/projects/{project}/schedules/{schedule}:deliver")}
SAMPLES = {"project": "proj-p", "run": "run-1", "owner": "alice", "instance": "i-1"}
SAMPLES |= {"agent": "agent-1", "target": "run-1:cancel", "schedule": "nightly"}
SAMPLES |= {"long_task": "lt-1"}


def _app() -> Starlette:
    config = GatewayConfig(
        grpc_target="127.0.0.1:1",  # never dialled: no lifespan runs here
        tokens=ApiTokens.parse(TOKENS),
        static_dir=None,
        failures=FailureLimit(limit=1000),
    )
    return create_app(config)


def _concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: SAMPLES[m.group(1)], path)


def _scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}


def test_every_route_is_documented_and_every_operation_served_by_its_route() -> None:
    app = _app()
    paths = document()["paths"]
    table_operations: set[tuple[str, str]] = set()
    for entry in ROUTES:
        if (entry.method, entry.path) in UNDOCUMENTED:
            assert not entry.operations
            continue
        assert entry.operations, f"{entry.method} {entry.path} has no OpenAPI operation"
        for operation in entry.operations:
            documented = operation.path or entry.path
            table_operations.add((entry.method, documented))
            served = paths[documented][entry.method.lower()]
            assert served["operationId"] == operation.operation_id
            # No bearer scheme on the public routes and the signed one (security: []).
            assert ("security" in served) == entry.tokenless
            if entry.signed:
                assert served["security"] == [] and "signature" in served["description"]
            # The documented path, filled in, reaches this entry's handler first.
            scope = _scope(entry.method, _concrete(documented))
            first = next(r for r in app.routes if r.matches(scope)[0] is Match.FULL)
            assert isinstance(first, Route) and first.endpoint is entry.handler, documented
    in_document = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    assert in_document == table_operations
    ids = [op["operationId"] for ops in paths.values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    assert {(e.method, e.path) for e in ROUTES if e.public} == PUBLIC
    assert {(e.method, e.path) for e in ROUTES if e.signed} == SIGNED


def test_run_commands_are_documented_served_and_labelled_alike() -> None:
    app = _app()
    (entry,) = (e for e in ROUTES if e.handler is runs.run_command)
    documented = {op.path.rpartition(":")[2] for op in entry.operations}
    assert documented == set(runs.COMMAND_VERBS) == COMMAND_VERBS
    for operation in entry.operations:
        # The metrics label of a command is its documented path.
        scope = _scope("POST", _concrete(operation.path))
        assert route_template(app.routes, scope) == operation.path


async def test_every_route_but_healthz_and_openapi_wants_a_token_or_a_signature() -> None:
    """Without credentials every route but the public two is a 401 problem before any gRPC
    call (none could be made here: no upstream is open). The webhook delivery wants its
    signature headers, and a bearer token does not stand in for them."""
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        for entry in ROUTES:
            paths = {op.path or entry.path for op in entry.operations} or {entry.path}
            for path in paths:
                answer = await http.request(entry.method, _concrete(path))
                if entry.public:
                    assert answer.status_code == 200, path
                    continue
                assert answer.status_code == 401, (path, answer.text)
                assert answer.headers["content-type"] == "application/problem+json"
                if entry.signed:
                    assert answer.json()["reason"] == "WEBHOOK_SIGNATURE_INVALID"
                    assert answer.headers["www-authenticate"].startswith("Truerun-Signature")
                    for headers in (
                        {"Authorization": f"Bearer {ALL}"},
                        {"X-Truerun-Delivery": "d-1"},
                        {"X-Truerun-Signature": "t=1,v1=00"},
                    ):
                        refused = await http.request(entry.method, _concrete(path), headers=headers)
                        assert refused.status_code == 401, (headers, refused.text)
                        assert refused.json()["reason"] == "WEBHOOK_SIGNATURE_INVALID"
                    continue
                assert answer.json()["reason"] == "UNAUTHENTICATED"
                assert answer.headers["www-authenticate"] == "Bearer"


class _Runs:
    """RunService's GetRun, and the token each call would carry."""

    def __init__(self, run: common_pb2.Run) -> None:
        self.run = run
        self.forwarded: list[str] = []

    async def GetRun(self, request: run_service_pb2.GetRunRequest, timeout: float) -> Any:
        self.forwarded.append(FORWARDED.get())
        assert request.id == self.run.id
        return self.run


def _request(app: Starlette, token: str, **path_params: str) -> Request:
    headers = [(b"authorization", f"Bearer {token}".encode())]
    scope = {**_scope("GET", "/"), "headers": headers, "path_params": path_params, "app": app}
    return Request({**scope, "client": ("127.0.0.1", 5000)})


async def test_a_handler_called_on_its_own() -> None:
    app = _app()
    fake = _Runs(common_pb2.Run(id="run-1", project_id="proj-p", etag="e7", task_id="t"))
    context: Context = app.state.gateway
    context.upstream = cast(Upstream, type("FakeUpstream", (), {"runs": fake})())

    answer = await runs.get_run(_request(app, P_TOKEN, project="proj-p", run="run-1"))
    assert answer.status_code == 200 and answer.headers["etag"] == "e7"
    assert b'"task_id":"t"' in answer.body
    assert fake.forwarded == [P_TOKEN]  # the call carries the caller's token

    # Asked under another project, the run is a missing one (even for a token seeing all).
    hidden = await runs.get_run(_request(app, ALL, project="proj-q", run="run-1"))
    assert hidden.status_code == 404 and b"RUN_NOT_FOUND" in hidden.body
    unknown = await runs.get_run(_request(app, "wrong", project="proj-p", run="run-1"))
    assert unknown.status_code == 401 and fake.forwarded == [P_TOKEN, ALL]
