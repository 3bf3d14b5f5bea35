"""RunPromotionService over gRPC (docs/long-tasks.md "Activation and promotion"): an ordinary
run's runtime asks before a non-pure tool call, reports its classifier's verdict, and turns
its run into a long task. Not behind the bearer-token interceptor: every call carries the
callback token of the calling run's attempt (``credentials.py``), checked before anything
else; the run's project, owner and agent come from the run, never from the request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import grpc
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1 import long_task_service_pb2_grpc

from coordinator.api.errors import unary
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.store.base import Loaded, RunReader
from kernel.errors import InvalidArgument
from kernel.ids import now_ms
from longtasks.api import drafts
from longtasks.api.convert import enum_number, task_state
from longtasks.api.credentials import AttemptAuth
from longtasks.domain.activation import AbsorbedCall, Path, Preflight, Verdict
from longtasks.domain.states import SideEffect
from longtasks.service.door import LongTaskDoor
from longtasks.service.inputs import ReceiptIn
from longtasks.service.promotion_rows import Promotion
from longtasks.service.reads import TaskReads

Ctx = grpc.aio.ServicerContext[Any, Any]
MAX_ABSORBED = 200
_TIERS = {enum_number(pb.SideEffectClass, "SIDE_EFFECT_CLASS", s): s for s in SideEffect}
_VERDICTS = {enum_number(pb.ActivationVerdict, "ACTIVATION_VERDICT", v): v for v in Verdict}
_PATHS = {enum_number(pb.ActivationPath, "ACTIVATION_PATH", p): p for p in Path}


def _tier(value: int) -> SideEffect:
    tier = _TIERS.get(value)
    if tier is None:
        raise InvalidArgument("tier is required (pure, idempotent, queryable or non_idempotent)")
    return tier


def _confidence(has: bool, value: float) -> float | None:
    if not has:
        return None
    if not 0.0 <= value <= 1.0:
        raise InvalidArgument("confidence must be between 0 and 1")
    return value


def _actor(loaded: Loaded) -> Actor:
    """The run's runtime process, named by its run attempt."""
    return Actor(ActorType.RUNTIME, f"run-attempt:{loaded.attempt.id if loaded.attempt else ''}")


class RunPromotionServicer(long_task_service_pb2_grpc.RunPromotionServiceServicer):
    def __init__(
        self,
        door: LongTaskDoor,
        reads: TaskReads,
        runs: RunReader,
        max_unfinished: int = 0,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._door = door
        self._auth = AttemptAuth(runs, reads, clock)
        self._max_unfinished = max_unfinished

    @unary
    async def PreflightToolCall(
        self, request: pb.PreflightToolCallRequest, context: Ctx
    ) -> pb.PreflightToolCallResponse:
        loaded = await self._auth.run_attempt(request.credential)
        tier = _tier(request.tier)
        outcome = await self._door.preflight(loaded.run.id, tier, _actor(loaded))
        return pb.PreflightToolCallResponse(
            preflight_needed=outcome.answer.answer is Preflight.PREFLIGHT_NEEDED,
            reason=outcome.answer.why,
            evaluated_tiers=[
                enum_number(pb.SideEffectClass, "SIDE_EFFECT_CLASS", t) for t in outcome.evaluated
            ],
            long_task_id=outcome.long_task_id,
        )

    @unary
    async def RecordClassification(
        self, request: pb.RecordClassificationRequest, context: Ctx
    ) -> pb.RecordClassificationResponse:
        loaded = await self._auth.run_attempt(request.credential)
        tier = _tier(request.tier)
        verdict = _VERDICTS.get(request.verdict)
        if verdict is None:
            raise InvalidArgument("verdict is required (ordinary or promote)")
        reason = drafts.text(request.reason, "reason", 1024)
        confidence = _confidence(request.HasField("confidence"), request.confidence)
        await self._door.record_verdict(
            loaded.run.id, tier, verdict, reason, confidence, _actor(loaded)
        )
        return pb.RecordClassificationResponse()

    @unary
    async def PromoteRun(
        self, request: pb.PromoteRunRequest, context: Ctx
    ) -> pb.PromoteRunResponse:
        loaded = await self._auth.run_attempt(request.credential)
        path = _PATHS.get(request.path)
        if path is None:
            raise InvalidArgument("path is required (lazy, deterministic, budget or plan)")
        calls, receipts = _absorbed(request.absorbed)
        draft = pb.LongTaskDraft()
        draft.CopyFrom(request.long_task)
        draft.project_id, draft.owner_id = loaded.run.project_id, loaded.run.owner_id
        draft.agent_id = loaded.run.agent_id or ""
        if not draft.steps and calls:  # everything already ran: only the prefix is the plan
            draft.steps.add(step_id="none", title="none", side_effect=pb.SIDE_EFFECT_CLASS_PURE)
            new = replace(drafts.new_task(draft), steps=())
        else:
            new = drafts.new_task(draft)
        promotion = Promotion(
            new,
            calls,
            receipts,
            path,
            drafts.text(request.reason, "reason", 1024),
            _confidence(request.HasField("confidence"), request.confidence),
        )
        assert loaded.attempt is not None
        changed = await self._door.promote(
            loaded.run.id, loaded.attempt.id, promotion, _actor(loaded), self._max_unfinished
        )
        return pb.PromoteRunResponse(
            long_task_id=changed.task.id,
            attempt_id=changed.made or "",
            state=task_state(changed.task),
        )


def _absorbed(
    absorbed: Any,
) -> tuple[tuple[AbsorbedCall, ...], dict[str, ReceiptIn]]:
    if len(absorbed) > MAX_ABSORBED:
        raise InvalidArgument(f"at most {MAX_ABSORBED} absorbed calls")
    calls: list[AbsorbedCall] = []
    receipts: dict[str, ReceiptIn] = {}
    for call in absorbed:
        where = f"absorbed call {call.step_id}"
        step = drafts.step_draft(
            pb.StepDraft(
                step_id=call.step_id,
                title=call.title,
                side_effect=call.side_effect,
                idempotency_key=call.idempotency_key,
            )
        )
        has_receipt = call.HasField("receipt")
        if has_receipt:
            receipts[call.step_id] = drafts.receipt_in(call.receipt)
        calls.append(
            AbsorbedCall(
                step_id=step.step_id,
                title=step.title,
                side_effect=step.side_effect,
                target=drafts.text(call.target, f"{where}: target", required=True),
                summary=drafts.text(call.summary, f"{where}: summary", required=True),
                idempotency_key=step.idempotency_key,
                has_receipt=has_receipt,
            )
        )
    return tuple(calls), receipts
