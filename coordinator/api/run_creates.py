"""RunService's creates: CreateRun, CreateRuns for producers that have many at once, and
CreateRunStream for producers that make many one by one.

All end in ``Transitions.create``, one call per run, so every run keeps its own span,
metrics and answer; concurrent plain creates share the store's writes there (the group
commit, coordinator/service/group_commit.py). CreateRuns validates and authorizes every
item before it creates any, so a bad item changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from truerun.v1 import common_pb2, run_service_pb2

from coordinator.api import approvals, convert, validation
from coordinator.api.auth import caller
from coordinator.api.authorization import allow, served
from coordinator.api.errors import refusal, stream, unary
from coordinator.dispatch.tokens import RuntimeTokens
from coordinator.domain import commands as c
from coordinator.domain.fingerprints import request_fingerprint, same_request
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType, ScopePolicy
from coordinator.service.door_answers import KeyLookup
from coordinator.service.queries import view
from coordinator.service.transitions import Result, Transitions
from coordinator.store.base import Loaded, RequestRecord
from kernel import json_bounds
from kernel.errors import (
    DomainError,
    IdempotencyKeyReused,
    InvalidArgument,
    PermissionDenied,
)

M = TypeVar("M", bound=Message)
Ctx = grpc.aio.ServicerContext[Any, Any]

#: The most runs one CreateRuns call creates.
MAX_CREATE_RUNS = 500


_CONFLICT_POLICIES = frozenset(common_pb2.ConflictPolicy.values())


def caller_actor() -> Actor:
    """The caller, from its token: never from the request (a request's ``actor`` field is
    ignored). A token configured with a name is a person; otherwise an API app."""
    who = caller()
    return Actor(ActorType.USER if who.named else ActorType.API_APP, who.name)


def run_proto(result: Result | Loaded) -> common_pb2.Run:
    return convert.run_to_proto(view(Loaded(result.run, result.attempt)))


def _created(result: Result) -> run_service_pb2.CreateRunResponse:
    return run_service_pb2.CreateRunResponse(run=run_proto(result), existing=result.existing)


class RunCreates:
    """Mixed into RunServicer, which provides the transition service and ``_once``."""

    _transitions: Transitions
    #: The runtime tokens' bindings, when this process serves runtimes (None: no check).
    _bindings: RuntimeTokens | None = None

    async def _once(
        self,
        method: str,
        request: Any,
        response_type: type[M],
        execute: Callable[[RequestRecord | None], Awaitable[M]],
        render: Callable[[Loaded], M],
        reused: Callable[[M], DomainError] | None = None,
    ) -> M:
        raise NotImplementedError

    @unary
    async def CreateRun(
        self, request: run_service_pb2.CreateRunRequest, context: Ctx
    ) -> run_service_pb2.CreateRunResponse:
        return await self._create(request)

    @stream
    async def CreateRunStream(
        self, requests: AsyncIterator[run_service_pb2.CreateRunStreamRequest], context: Ctx
    ) -> AsyncIterator[run_service_pb2.CreateRunStreamResponse]:
        # One message at a time, answered in order; a refused one is answered with its
        # status and the stream goes on (its caller was authenticated when it opened).
        async for message in requests:
            try:
                created = await self._create(message.request)
            except AssertionError:
                raise
            except Exception as error:
                failed = refusal("CreateRunStream", error)
                yield run_service_pb2.CreateRunStreamResponse(error=failed)
            else:
                yield run_service_pb2.CreateRunStreamResponse(created=created)

    async def _create(
        self, request: run_service_pb2.CreateRunRequest
    ) -> run_service_pb2.CreateRunResponse:
        spec = self._spec(request)
        use_existing = request.conflict_policy != common_pb2.CONFLICT_POLICY_FAIL

        async def execute(record: RequestRecord | None) -> run_service_pb2.CreateRunResponse:
            return _created(await self._transitions.create(spec, use_existing, record))

        def render(committed: Loaded) -> run_service_pb2.CreateRunResponse:
            return run_service_pb2.CreateRunResponse(run=run_proto(committed), existing=False)

        def reused(first: run_service_pb2.CreateRunResponse) -> DomainError:
            # A request id names one create as an idempotency key does: sent again with
            # another request, it is refused the same way, naming the first run
            # (docs/state-model.md "6a. Idempotency keys and request ids").
            return IdempotencyKeyReused(
                f"request_id {request.request_id!r} was used for run {first.run.id} with a "
                "different request; send that request again or use a new request_id",
                run_id=first.run.id,
                request_id=request.request_id,
            )

        return await self._once(
            "CreateRun", request, run_service_pb2.CreateRunResponse, execute, render, reused
        )

    @unary
    async def CreateRuns(
        self, request: run_service_pb2.CreateRunsRequest, context: Ctx
    ) -> run_service_pb2.CreateRunsResponse:
        if not 1 <= len(request.requests) <= MAX_CREATE_RUNS:
            raise InvalidArgument(f"requests: between 1 and {MAX_CREATE_RUNS} items")
        specs = [self._item(i, item) for i, item in enumerate(request.requests)]
        keyed = await self._keys_of(specs)
        # Each through the door on its own; started together, they share the group writes.
        results = await asyncio.gather(
            *(self._transitions.create(spec, keyed=keyed.get(i)) for i, spec in enumerate(specs)),
            return_exceptions=True,
        )
        for outcome in results:
            if isinstance(outcome, BaseException):
                raise outcome
        return run_service_pb2.CreateRunsResponse(
            responses=[_created(r) for r in results if isinstance(r, Result)]
        )

    async def _keys_of(self, specs: list[c.RunSpec]) -> dict[int, KeyLookup]:
        """Every keyed item's key, read before anything is created, so an item whose key
        names a run another request made refuses the whole call with nothing created
        (IDEMPOTENCY_KEY_REUSED, as CreateRun answers it), as does a key two items use for
        different runs (INVALID_ARGUMENT). What each read found goes on to the item's
        create, which then reads no key again. Items without a key read nothing. (A create
        of the key committing between these reads and the batch's creates is answered as
        by CreateRun: that item's create raises, after the others were made.)"""
        first: dict[tuple[str, str], int] = {}
        for index, spec in enumerate(specs):
            if spec.idempotency_key is None:
                continue
            earlier = first.setdefault((spec.project_id, spec.idempotency_key), index)
            if earlier != index and request_fingerprint(specs[earlier]) != request_fingerprint(
                spec
            ):
                raise InvalidArgument(
                    f"requests[{index}]: idempotency_key {spec.idempotency_key!r} is also "
                    f"requests[{earlier}]'s, for a different run"
                )
        if not first:
            return {}
        reader = self._transitions.reader
        found = await asyncio.gather(
            *(reader.find_by_idempotency_key(project_id, key) for project_id, key in first)
        )
        lookups: dict[int, KeyLookup] = {}
        for index, existing in zip(first.values(), found, strict=True):
            spec = specs[index]
            if existing is not None and not same_request(existing.run, spec):
                raise IdempotencyKeyReused(
                    f"requests[{index}]: idempotency key {spec.idempotency_key!r} was used "
                    f"for run {existing.run.id} with a different request",
                    run_id=existing.run.id,
                )
            lookups[index] = KeyLookup(existing)
        # A later item with an earlier one's key reads it again in its own create: the
        # earlier one may be the create that makes it.
        return lookups

    def _item(self, index: int, item: run_service_pb2.CreateRunRequest) -> c.RunSpec:
        """One CreateRuns item, validated and authorized as CreateRun's request; what a
        batch item may not carry is refused here, before anything is created."""
        try:
            if item.request_id:
                raise InvalidArgument("request_id: items are made idempotent by idempotency_key")
            if item.conflict_policy == common_pb2.CONFLICT_POLICY_FAIL:
                raise InvalidArgument("conflict_policy: items take only use-existing")
            spec = self._spec(item)
            if spec.execution_scope and spec.scope_policy is not ScopePolicy.QUEUE:
                raise InvalidArgument("scope_policy: items take only queue")
            return spec
        except PermissionDenied:
            raise
        except DomainError as exc:
            raise type(exc)(f"requests[{index}]: {exc.message}", **exc.metadata) from None

    def _spec(self, request: run_service_pb2.CreateRunRequest) -> c.RunSpec:
        project_id = validation.name(request.project_id, "project_id")
        owner_id = validation.name(request.owner_id, "owner_id")
        task_id = validation.name(request.task_id, "task_id")
        assert project_id and owner_id and task_id
        if not caller().sees(project_id):
            raise PermissionDenied(f"this token may not create runs in project {project_id}")
        allow("RunService.CreateRun", project_id, owner_id)
        served(self._bindings, owner_id, project_id)
        try:
            scope_policy = convert.enum_from_proto(
                ScopePolicy, "SCOPE_POLICY", request.scope_policy
            )
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        if request.conflict_policy not in _CONFLICT_POLICIES:
            raise InvalidArgument(f"unknown conflict_policy {request.conflict_policy}")
        bounds = json_bounds.current()
        if (size := request.spec.ByteSize()) > bounds.max_bytes:  # before it is even decoded
            violation = json_bounds.Violation(json_bounds.BYTES, bounds.max_bytes, size)
            raise json_bounds.refusal(violation, "spec")
        if len(request.required_labels) > validation.MAX_LABELS:
            raise InvalidArgument(f"at most {validation.MAX_LABELS} required_labels")
        labels = tuple(
            validation.name(label, "required_labels[]") or "" for label in request.required_labels
        )
        spec = convert.struct_to_dict(request.spec)
        # depth, keys/items, strings and size: what every reader can render (kernel/json_bounds)
        json_bounds.check(spec, bounds, "spec")
        validation.self_fence_after_ms(spec)
        validation.command_spec(spec)
        requires_approval, approval_policy = approvals.requested(request)
        return c.RunSpec(
            project_id=project_id,
            owner_id=owner_id,
            task_id=task_id,
            created_by=caller_actor(),
            task_revision=validation.in_range(request.task_revision, "task_revision", 0, 2**62),
            agent_id=validation.name(request.agent_id, "agent_id", required=False),
            execution_scope=validation.text(request.execution_scope, "execution_scope", 256),
            scope_policy=scope_policy or ScopePolicy.QUEUE,
            trigger_type=validation.name(request.trigger_type, "trigger_type", required=False)
            or "manual",
            trigger_id=validation.text(request.trigger_id, "trigger_id", 256),
            idempotency_key=validation.idempotency_key(request.idempotency_key),
            priority=validation.in_range(request.priority, "priority", -1000, 1000),
            max_attempts=validation.in_range(request.max_attempts or 1, "max_attempts", 1, 100),
            idempotent=request.idempotent,
            run_now=request.run_now,
            requires_approval=requires_approval,
            approval_policy=approval_policy,
            pinned_runtime_instance_id=validation.name(
                request.pinned_runtime_instance_id, "pinned_runtime_instance_id", required=False
            ),
            required_labels=labels,
            spec=spec,
        )
