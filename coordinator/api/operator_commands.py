"""RunService's operator commands (docs/state-model.md "Operator commands"): each needs a
named actor and a reason, and goes through the transition service like every change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf.message import Message
from truerun.v1 import common_pb2, run_service_pb2

from coordinator.api import convert, validation
from coordinator.api.auth import operator as operator_caller
from coordinator.api.errors import unary
from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service import operator
from coordinator.service.queries import view
from coordinator.service.transitions import Result, Transitions
from coordinator.store.base import Loaded, RequestRecord
from kernel.errors import InvalidArgument

M = TypeVar("M", bound=Message)
Ctx = grpc.aio.ServicerContext[Any, Any]

_RESOLUTIONS = {
    run_service_pb2.RESOLUTION_SUCCEEDED: c.ResolveAs.SUCCEEDED,
    run_service_pb2.RESOLUTION_FAILED: c.ResolveAs.FAILED,
    run_service_pb2.RESOLUTION_NOT_STARTED: c.ResolveAs.NOT_STARTED,
}


class _Request(Protocol):
    id: str
    etag: str
    reason: str

    @property
    def actor(self) -> common_pb2.Actor: ...


def _run_proto(result: Result | Loaded) -> common_pb2.Run:
    return convert.run_to_proto(view(Loaded(result.run, result.attempt)))


def audited_actor() -> Actor:
    """The operator who decides, from the caller's operator token (the audit trail names
    the token's configured name); a request's ``actor`` field is ignored."""
    return Actor(ActorType.OPERATOR, operator_caller().name)


def audited_reason(value: str) -> str:
    reason = validation.text(value.strip(), "reason")
    if not reason:
        raise InvalidArgument("reason is required: an operator command says why")
    return reason


class OperatorCommands:
    """Mixed into RunServicer, which provides the transition service and ``_once``."""

    _transitions: Transitions

    async def _once(
        self,
        method: str,
        request: Any,
        response_type: type[M],
        execute: Callable[[RequestRecord | None], Awaitable[M]],
        render: Callable[[Loaded], M],
    ) -> M:
        raise NotImplementedError

    async def _visible(self, raw_id: str, field: str = "id") -> str:
        raise NotImplementedError

    async def _fields(self, request: _Request) -> dict[str, Any]:
        actor = audited_actor()  # an operator token first: nothing is read for anyone else
        return {
            "run_id": await self._visible(request.id),
            "actor": actor,
            "expected_version": validation.etag(request.etag),
            "reason": audited_reason(request.reason),
        }

    async def _simple(self, method: str, request: Any, command: c.OperatorCommand) -> Any:
        async def execute(record: RequestRecord | None) -> common_pb2.Run:
            return _run_proto(await self._transitions.execute(command, record))

        return await self._once(method, request, common_pb2.Run, execute, _run_proto)

    @unary
    async def ResolveRun(
        self, request: run_service_pb2.ResolveRunRequest, context: Ctx
    ) -> common_pb2.Run:
        fields = await self._fields(request)
        if request.resolution not in _RESOLUTIONS:
            raise InvalidArgument("resolution must be SUCCEEDED, FAILED or NOT_STARTED")
        command = c.Resolve(**fields, resolved_as=_RESOLUTIONS[request.resolution])

        async def execute(record: RequestRecord | None) -> common_pb2.Run:
            return _run_proto(await operator.resolve(self._transitions, command, record))

        return await self._once("ResolveRun", request, common_pb2.Run, execute, _run_proto)

    @unary
    async def FailRun(
        self, request: run_service_pb2.FailRunRequest, context: Ctx
    ) -> common_pb2.Run:
        result: common_pb2.Run = await self._simple(
            "FailRun", request, c.FailRun(**(await self._fields(request)))
        )
        return result

    @unary
    async def PauseRun(
        self, request: run_service_pb2.PauseRunRequest, context: Ctx
    ) -> common_pb2.Run:
        result: common_pb2.Run = await self._simple(
            "PauseRun", request, c.PauseRun(**(await self._fields(request)))
        )
        return result

    @unary
    async def ResumeRun(
        self, request: run_service_pb2.ResumeRunRequest, context: Ctx
    ) -> common_pb2.Run:
        result: common_pb2.Run = await self._simple(
            "ResumeRun", request, c.ResumeRun(**(await self._fields(request)))
        )
        return result

    @unary
    async def RequeueRun(
        self, request: run_service_pb2.RequeueRunRequest, context: Ctx
    ) -> common_pb2.Run:
        result: common_pb2.Run = await self._simple(
            "RequeueRun", request, c.Requeue(**(await self._fields(request)))
        )
        return result
