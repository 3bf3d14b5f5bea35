"""The gateway's route table: every route with the OpenAPI operations it serves.

``create_app`` (gateway/app.py) serves ``ROUTES`` in this order (Starlette takes the first
route that matches) and gateway/openapi.py builds the document's paths from the same
entries, so a route cannot be served undocumented or documented unserved
(tests/gateway/test_routes.py). Handlers live in one module per resource; the schedules'
entries are in schedule_routes.py, the long tasks' in long_task_routes.py.
"""

from __future__ import annotations

from gateway.routes import capacity, events, meta, output, run_filters, runs
from gateway.routes.long_task_routes import LONG_TASK_ROUTES
from gateway.routes.me import ME_ROUTE
from gateway.routes.notice_routes import NOTICE_ROUTES
from gateway.routes.schedule_routes import SCHEDULE_ROUTES
from gateway.routes.spec import (
    AFTER_SEQUENCE,
    ATTEMPT_ID,
    DISPLAY_FILTER,
    IDEMPOTENCY_KEY,
    MAX_BYTES,
    OFFSET,
    PAGE_SIZE,
    PAGE_TOKEN,
    PROJECT,
    RUN,
    RUN_FILTERS,
    Entry,
    Operation,
    command,
    json_response,
    param,
    problems,
    ref,
    stream,
)
from kernel.derived_keys import RESERVED_PREFIXES

__all__ = ["ROUTES", "Entry", "Operation"]

BASE = "/v1/projects/{project}"

_OPERATOR_COMMANDS = (
    (
        "resolve",
        "Resolves an unknown or lost attempt as succeeded, failed or not started "
        "(not started: the run is queued again on a new attempt).",
    ),
    ("fail", "Fails a run that never started: queued, paused or dead-lettered."),
    ("pause", "Takes a queued run out of the queue; a paused run is never claimed."),
    ("resume", "Puts a paused run back in the queue, in its old place."),
    ("requeue", "Puts a dead-lettered run back in the queue; its recovery count restarts."),
)

_COMMANDS = (
    command(
        "cancel",
        "CancelBody",
        "CancelRunResponse",
        "200",
        "Cancelled at once before the start fence; after it a durable cancel request "
        "(the run shows cancelling until the runtime confirms).",
    ),
    command("approve", "CommandBody", "Run", "200", "Approves a run that waits for approval."),
    command(
        "retry",
        "CommandBody",
        "Run",
        "201",
        "Creates a new run retrying a terminal one; the original never changes.",
    ),
    *(
        command(
            verb,
            "ResolveBody" if verb == "resolve" else "OperatorBody",
            "Run",
            "200",
            "Operator command (audited: the token's identity and the reason are recorded). "
            f"{description}",
            body_required=True,
        )
        for verb, description in _OPERATOR_COMMANDS
    ),
)

ROUTES: tuple[Entry, ...] = (
    Entry(
        "GET",
        "/healthz",
        meta.healthz,
        (
            Operation(
                operation_id="healthz",
                summary="liveness",
                responses={"200": json_response("the gateway serves", "Health")},
            ),
        ),
        public=True,
    ),
    # The document does not describe itself.
    Entry("GET", "/v1/openapi.json", meta.openapi_document, public=True),
    ME_ROUTE,
    Entry(
        "POST",
        f"{BASE}/runs",
        runs.create_run,
        (
            Operation(
                operation_id="create_run",
                summary="create a run",
                description="201 with the new run, or 200 with the run an Idempotency-Key "
                "names for the same request; with a different request, 422 "
                "IDEMPOTENCY_KEY_REUSED naming that run. A key (or request_id) starting with "
                f"{' or '.join(RESERVED_PREFIXES)} is 400 RESERVED_KEY (truerun's own).",
                parameters=(PROJECT, IDEMPOTENCY_KEY),
                body="CreateRunBody",
                body_required=True,
                responses={
                    "201": json_response("created", "Run", ("ETag", "Location")),
                    "200": json_response("the existing run", "Run", ("ETag", "Location")),
                    "403": {
                        "description": "the token may not act in this project",
                        "content": {
                            "application/problem+json": {"schema": {"$ref": ref("Problem")}}
                        },
                    },
                    **problems("400", "401", "409", "413", "422", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/runs",
        runs.list_runs,
        (
            Operation(
                operation_id="list_runs",
                summary="list runs",
                description="Newest first. A project the token does not see is empty.",
                parameters=(
                    PROJECT,
                    *RUN_FILTERS,
                    DISPLAY_FILTER,
                    PAGE_SIZE,
                    PAGE_TOKEN,
                ),
                responses={
                    "200": json_response("a page of runs", "ListRunsResponse"),
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/runs:count",
        run_filters.count_runs,
        (
            Operation(
                operation_id="count_runs",
                summary="count runs per display state",
                description="How many runs match the list's filters (display_state aside), "
                "per display state. complete=false: the server stopped at its scan cap and "
                "counted only the newest matches. A project the token does not see is empty.",
                parameters=(PROJECT, *RUN_FILTERS),
                responses={
                    "200": json_response("the counts", "CountRunsResponse"),
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/runs/{{run}}",
        runs.get_run,
        (
            Operation(
                operation_id="get_run",
                summary="get a run",
                parameters=(PROJECT, RUN),
                responses={
                    "200": json_response("the run", "Run", ("ETag",)),
                    **problems("400", "401", "404", "503"),
                },
            ),
        ),
    ),
    # {target} is <run>:<verb>: one route, a documented path per verb.
    Entry("POST", f"{BASE}/runs/{{target}}", runs.run_command, _COMMANDS),
    Entry(
        "GET",
        f"{BASE}/runs/{{run}}/attempts",
        runs.list_attempts,
        (
            Operation(
                operation_id="list_attempts",
                summary="list a run's attempts",
                parameters=(PROJECT, RUN),
                responses={
                    "200": json_response("every attempt, oldest first", "ListAttemptsResponse"),
                    **problems("400", "401", "404", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/runs/{{run}}/events",
        events.list_run_events,
        (
            Operation(
                operation_id="list_run_events",
                summary="list a run's events",
                parameters=(PROJECT, RUN, AFTER_SEQUENCE, PAGE_SIZE, PAGE_TOKEN),
                responses={
                    "200": json_response("a page of events", "ListRunEventsResponse"),
                    **problems("400", "401", "404", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/runs/{{run}}/events:stream",
        events.stream_run_events,
        (
            stream(
                "stream run events",
                "The run's committed events from after Last-Event-ID (a sequence), then new "
                "ones as they commit. Message ids are the events' sequences.",
                (RUN,),
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/runs/{{run}}/output",
        output.read_output,
        (
            Operation(
                operation_id="read_run_output",
                summary="read a run's output",
                description="A page of an attempt's stored output (redacted, capped), from "
                "the output store: output is not in the event log. Offsets are bytes of the "
                "attempt's UTF-8 text; to follow, ask again from next_offset. Without "
                "attempt_id: the run's current attempt.",
                parameters=(PROJECT, RUN, ATTEMPT_ID, OFFSET, MAX_BYTES),
                responses={
                    "200": json_response("a page of output", "ReadRunOutputResponse"),
                    **problems("400", "401", "404", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/runs/{{run}}/output:stream",
        output.stream_output,
        (
            stream(
                "stream run output",
                "Follows a run's output until the run ends. Without attempt_id it reads the "
                "current attempt and moves on to each later one (the rest of the old one "
                "first). Resumes from Last-Event-ID (`<attempt_id>:<offset>`, every message's "
                "id) or from attempt_id and offset.",
                (RUN, ATTEMPT_ID, OFFSET),
                "`event: attempt` (`data: {attempt_id, attempt_no}`) when an attempt begins, "
                "`event: output` (`data: {attempt_id, attempt_no, offset, text, kind}`) per "
                "chunk, `id: <attempt_id>:<offset after it>`, and `event: end` once the run "
                "ended and everything was sent; then the stream closes",
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/events",
        events.list_project_events,
        (
            Operation(
                operation_id="list_project_events",
                summary="list project events",
                parameters=(
                    PROJECT,
                    param("after_cursor", "query", "a cursor the server returned"),
                    PAGE_SIZE,
                ),
                responses={
                    "200": json_response("a page of events", "ListProjectEventsResponse"),
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/events:stream",
        events.stream_project_events,
        (
            stream(
                "stream project events",
                "Every committed event of the project, in cursor order, from after "
                "Last-Event-ID (a cursor), then new ones. Message ids are the events' "
                "cursors. With from=now and no Last-Event-ID: no history, only later "
                "commits; the first message is a bare id (the position now) to resume from.",
                (
                    param(
                        "from",
                        "query",
                        "now: start at the current position (ignored with a Last-Event-ID)",
                        {"type": "string", "enum": ["now"]},
                    ),
                ),
            ),
        ),
    ),
    Entry(
        "GET",
        "/v1/runtimes",
        capacity.list_runtimes,
        (
            Operation(
                operation_id="list_runtimes",
                summary="list runtimes",
                description="The runtime instances connected now (fresh observation) and "
                "those seen recently whose heartbeats stopped (stale), each with D, O, "
                "runtime active, last heartbeat and its age, lineage and agent version. A "
                "token of every project sees every runtime; a project token those of the "
                "owners with runs in its projects.",
                parameters=(param("owner_id", "query", "only this owner's runtimes"),),
                responses={
                    "200": json_response("the runtimes", "ListRuntimesResponse"),
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        "/v1/agents",
        capacity.list_agents,
        (
            Operation(
                operation_id="list_agents",
                summary="list agents",
                description="Every configured agent with R and its live attempts, whether "
                "or not a run names it.",
                responses={
                    "200": json_response("the agents", "ListAgentsResponse"),
                    **problems("401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        "/v1/capacity/owners/{owner}/instances/{instance}",
        capacity.get_occupancy,
        (
            Operation(
                operation_id="get_occupancy",
                summary="get occupancy",
                description="D, O, runtime active, durable rows, the merged task set and "
                "the observation's age for one runtime instance.",
                parameters=(
                    param("owner", "path", "the owner id"),
                    param("instance", "path", "the runtime instance id"),
                ),
                responses={
                    "200": json_response("the occupancy", "Occupancy"),
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        "/v1/agents/{agent}",
        capacity.get_agent,
        (
            Operation(
                operation_id="get_agent",
                summary="get an agent",
                description="R (concurrency) and the live attempts of one agent.",
                parameters=(param("agent", "path", "the agent id"),),
                responses={
                    "200": json_response("the agent", "Agent"),
                    **problems("400", "401", "404", "503"),
                },
            ),
        ),
    ),
    *SCHEDULE_ROUTES,
    *LONG_TASK_ROUTES,
    *NOTICE_ROUTES,
)
