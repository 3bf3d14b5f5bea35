"""RunService over gRPC: validate, call the transition service or the queries, convert."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from truerun.v1 import common_pb2, run_service_pb2, run_service_pb2_grpc

from coordinator.api import convert, run_filters, validation
from coordinator.api.auth import caller
from coordinator.api.authorization import allow
from coordinator.api.errors import stream, unary
from coordinator.api.operator_commands import OperatorCommands
from coordinator.api.request_ids import once
from coordinator.api.run_creates import RunCreates, caller_actor, run_proto
from coordinator.dispatch.tokens import RuntimeTokens
from coordinator.domain import commands as c
from coordinator.domain.cursor import EventCursor
from coordinator.domain.states import DisplayState, RunStatus
from coordinator.service.feed import EventFeed
from coordinator.service.hub import EventHub
from coordinator.service.output_reads import read_output
from coordinator.service.queries import RunQueries, RunView
from coordinator.service.transitions import Result, Transitions
from coordinator.store.base import Loaded, RequestRecord
from coordinator.store.snapshots import run_from_snapshot
from kernel.errors import DomainError, InvalidArgument, PermissionDenied, RunNotFound

M = TypeVar("M", bound=Message)
Ctx = grpc.aio.ServicerContext[Any, Any]

WATCH_POLL_SECONDS = 1.0

_CANCEL_OUTCOMES = {
    "already_requested": run_service_pb2.CANCEL_OUTCOME_ALREADY_REQUESTED,
    "already_terminal": run_service_pb2.CANCEL_OUTCOME_ALREADY_TERMINAL,
}


def _cancel_response(result: Result | Loaded, outcome: str) -> run_service_pb2.CancelRunResponse:
    if outcome in _CANCEL_OUTCOMES:
        code = _CANCEL_OUTCOMES[outcome]
    elif result.run.status is RunStatus.CANCELLED:
        code = run_service_pb2.CANCEL_OUTCOME_CANCELLED
    else:
        code = run_service_pb2.CANCEL_OUTCOME_REQUESTED
    return run_service_pb2.CancelRunResponse(run=run_proto(result), outcome=code)


class RunServicer(RunCreates, OperatorCommands, run_service_pb2_grpc.RunServiceServicer):
    def __init__(
        self,
        transitions: Transitions,
        queries: RunQueries,
        hub: EventHub,
        bindings: RuntimeTokens | None = None,
    ) -> None:
        """``bindings``: the runtime tokens of this process's RuntimeService; a create for
        an owner no runtime serves in the project is refused (OWNER_NOT_SERVED)."""
        self._bindings = bindings
        self._transitions = transitions
        self._queries = queries
        self._hub = hub
        self._feed = EventFeed(transitions.reader, hub)

    async def _once(
        self,
        method: str,
        request: Any,
        response_type: type[M],
        execute: Callable[[RequestRecord | None], Awaitable[M]],
        render: Callable[[Loaded], M],
        reused: Callable[[M], DomainError] | None = None,
    ) -> M:
        """AIP-155 (``request_ids.once``): ``render`` answers from the run and attempt the
        request committed, read back from its record's snapshot; ``reused`` the error for
        the id sent again with another payload (default REQUEST_ID_REUSED)."""
        return await once(
            self._transitions.reader,
            method,
            request,
            response_type,
            execute,
            lambda snapshot: render(run_from_snapshot(snapshot)),
            reused,
        )

    # -- commands -----------------------------------------------------------------------------

    @unary
    async def CancelRun(
        self, request: run_service_pb2.CancelRunRequest, context: Ctx
    ) -> run_service_pb2.CancelRunResponse:
        run_id = await self._acting(request.id, "RunService.CancelRun")
        command = c.RequestCancel(
            run_id,
            caller_actor(),
            expected_version=validation.etag(request.etag),
            reason=validation.text(request.reason, "reason") or "cancelled_by_user",
        )

        async def execute(record: RequestRecord | None) -> run_service_pb2.CancelRunResponse:
            result = await self._transitions.execute(command, record)
            return _cancel_response(result, result.outcome)

        return await self._once(
            "CancelRun",
            request,
            run_service_pb2.CancelRunResponse,
            execute,
            lambda committed: _cancel_response(committed, "applied"),
        )

    @unary
    async def RetryRun(
        self, request: run_service_pb2.RetryRunRequest, context: Ctx
    ) -> common_pb2.Run:
        run_id = await self._acting(request.id, "RunService.RetryRun")
        command = c.ManualRetry(run_id, caller_actor())

        async def execute(record: RequestRecord | None) -> common_pb2.Run:
            return run_proto(await self._transitions.execute(command, record))

        return await self._once("RetryRun", request, common_pb2.Run, execute, run_proto)

    @unary
    async def ApproveRun(
        self, request: run_service_pb2.ApproveRunRequest, context: Ctx
    ) -> common_pb2.Run:
        run_id = await self._acting(request.id, "RunService.ApproveRun")
        command = c.Approve(
            run_id,
            caller_actor(),
            expected_version=validation.etag(request.etag),
            # the approver's groups come from the token, never from the request
            approver_groups=caller().groups,
        )

        async def execute(record: RequestRecord | None) -> common_pb2.Run:
            return run_proto(await self._transitions.execute(command, record))

        return await self._once("ApproveRun", request, common_pb2.Run, execute, run_proto)

    # -- reads --------------------------------------------------------------------------------

    async def _visible(self, raw_id: str, field: str = "id") -> str:
        """The run's id, if the caller's token sees its project; another project's run is
        answered exactly like a missing one (RUN_NOT_FOUND)."""
        return (await self._visible_view(raw_id, field)).run.id

    async def _acting(self, raw_id: str, rpc: str) -> str:
        """The run's id, if the caller may act on it by ``rpc``'s rule: another project's
        run is a missing one; another owner's needs a token that acts for that owner
        (OWNER_NOT_PERMITTED; docs/tenancy.md)."""
        found = await self._visible_view(raw_id)
        allow(rpc, found.run.project_id, found.run.owner_id)
        return found.run.id

    async def _visible_view(self, raw_id: str, field: str = "id") -> RunView:
        run_id = validation.run_id(raw_id, field)
        found = await self._queries.get(run_id)
        if not caller().sees(found.run.project_id):
            raise RunNotFound(f"run {run_id} does not exist", run_id=run_id)
        return found

    @staticmethod
    def _project(raw: str) -> str:
        """A project the caller's token sees (PERMISSION_DENIED otherwise)."""
        project_id = validation.name(raw, "project_id")
        assert project_id is not None
        if not caller().sees(project_id):
            raise PermissionDenied(f"this token does not see project {project_id}")
        return project_id

    @unary
    async def GetRun(self, request: run_service_pb2.GetRunRequest, context: Ctx) -> common_pb2.Run:
        return convert.run_to_proto(await self._visible_view(request.id))

    @unary
    async def ListRuns(
        self, request: run_service_pb2.ListRunsRequest, context: Ctx
    ) -> run_service_pb2.ListRunsResponse:
        views, token = await self._queries.list_runs(
            run_filters.run_filter(request),
            run_filters.display_states(request),
            request.page_size,
            request.page_token,
        )
        return run_service_pb2.ListRunsResponse(
            runs=[convert.run_to_proto(v) for v in views], next_page_token=token
        )

    @unary
    async def CountRuns(
        self, request: run_service_pb2.CountRunsRequest, context: Ctx
    ) -> run_service_pb2.CountRunsResponse:
        counts, complete = await self._queries.count_runs(run_filters.run_filter(request))
        # In DisplayState's order, so two answers over the same runs are equal.
        entries = [
            run_service_pb2.DisplayStateCount(
                display_state=common_pb2.DisplayState.ValueType(
                    convert.enum_to_proto(state, "DISPLAY_STATE")
                ),
                count=counts[state],
            )
            for state in DisplayState
            if counts.get(state)
        ]
        return run_service_pb2.CountRunsResponse(
            counts=entries, total=sum(counts.values()), complete=complete
        )

    @unary
    async def ListRunEvents(
        self, request: run_service_pb2.ListRunEventsRequest, context: Ctx
    ) -> run_service_pb2.ListRunEventsResponse:
        events, token = await self._queries.events(
            await self._visible(request.run_id, "run_id"),
            request.after_sequence,
            request.page_size,
            request.page_token,
        )
        return run_service_pb2.ListRunEventsResponse(
            events=[convert.event_to_proto(e) for e in events], next_page_token=token
        )

    @unary
    async def ListAttempts(
        self, request: run_service_pb2.ListAttemptsRequest, context: Ctx
    ) -> run_service_pb2.ListAttemptsResponse:
        attempts = await self._queries.attempts(await self._visible(request.run_id, "run_id"))
        return run_service_pb2.ListAttemptsResponse(
            attempts=[convert.attempt_to_proto(a) for a in attempts]
        )

    @unary
    async def ReadRunOutput(
        self, request: run_service_pb2.ReadRunOutputRequest, context: Ctx
    ) -> run_service_pb2.ReadRunOutputResponse:
        run_id = await self._visible(request.run_id, "run_id")
        page = await read_output(
            self._transitions.reader, run_id, request.attempt_id, request.offset, request.max_bytes
        )
        return convert.output_page_to_proto(page)

    @unary
    async def ListProjectEvents(
        self, request: run_service_pb2.ListProjectEventsRequest, context: Ctx
    ) -> run_service_pb2.ListProjectEventsResponse:
        project_id = self._project(request.project_id)
        events, next_cursor = await self._queries.project_events(
            project_id, request.after_cursor, request.page_size
        )
        return run_service_pb2.ListProjectEventsResponse(
            events=[convert.event_to_proto(e) for e in events], next_cursor=next_cursor
        )

    @unary
    async def GetEventCursor(
        self, request: run_service_pb2.GetEventCursorRequest, context: Ctx
    ) -> run_service_pb2.GetEventCursorResponse:
        # The stream's cursors are global positions: one cursor is right for every project.
        self._project(request.project_id)
        return run_service_pb2.GetEventCursorResponse(cursor=await self._queries.event_cursor())

    @stream
    async def WatchRunEvents(
        self, request: run_service_pb2.WatchRunEventsRequest, context: Ctx
    ) -> AsyncIterator[common_pb2.RunEvent]:
        if not request.run_id:
            async for project_event in self._watch_project(request):
                yield project_event
            return
        run_id = await self._visible(request.run_id, "run_id")
        after = request.after_sequence
        if after < 0:
            raise InvalidArgument("after_sequence must not be negative")
        if request.after_cursor:
            raise InvalidArgument("after_cursor is for a project-wide watch; use after_sequence")
        with self._feed.follow("run", run_id) as committed:
            while True:
                committed.clear()
                events, _ = await self._queries.events(run_id, after, 500, "")
                for event in events:
                    yield convert.event_to_proto(event)
                    after = event.sequence
                if not events:
                    await _wait(committed, WATCH_POLL_SECONDS)

    async def _watch_project(
        self, request: run_service_pb2.WatchRunEventsRequest
    ) -> AsyncIterator[common_pb2.RunEvent]:
        """The project's stream in cursor order: stored events, then new commits."""
        project_id = self._project(request.project_id)
        if request.after_sequence:
            raise InvalidArgument("after_sequence needs run_id; resume a project with after_cursor")
        after = request.after_cursor
        EventCursor.parse(after)  # a malformed cursor fails before the stream starts
        with self._feed.follow("project", project_id) as committed:
            while True:
                committed.clear()
                events, after = await self._queries.project_events(project_id, after, 500)
                for event in events:
                    yield convert.event_to_proto(event)
                if len(events) < 500:
                    await _wait(committed, WATCH_POLL_SECONDS)


async def _wait(committed: asyncio.Event, timeout: float) -> None:
    """Until a commit may have touched what we follow, or ``timeout`` (then look anyway)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(committed.wait(), timeout)
