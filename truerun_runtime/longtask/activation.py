"""An ordinary run's side of activation (docs/long-tasks.md "Activation and promotion";
docs/runtime-protocol.md "Activation"). The runtime calls:

    activation = Activation(address, run_id, run_attempt_id, callback_token, request)
    async with activation:
        await activation.begin()                    # path A: multi-day intent or a force
        for call in the model's tool calls:
            if await activation.before_tool(call) == PROMOTED:
                ... go on as the long task's attempt (LongTaskAttempt, same credential)
            receipt = run the tool
            activation.executed(call, receipt)      # kept for absorption, in order
        await activation.spent(0.85, unfinished=True)   # budget threshold: promotes
        await activation.plan_proposed(steps, waits=True)  # multi-stage plan: promotes

``before_tool`` asks truerun (``PreflightToolCall``) before every non-pure call; only when
truerun says a preflight is due does it call the classifier, record its verdict
(``RecordClassification``) and, on promote, ``PromoteRun`` with the executed prefix. The
budget and plan paths and path A promote without the classifier. A failed promotion raises
``PromotionFailed``: the runtime must stop (truerun asked the run to stop already).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import timestamp_pb2
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1 import long_task_service_pb2_grpc

from .classifier import Classification, Classifier, Request, RuleClassifier, ToolCall
from .errors import from_rpc

ALLOWED = "allowed"
PROMOTED = "promoted"
_TIER = {
    "pure": pb.SIDE_EFFECT_CLASS_PURE,
    "idempotent": pb.SIDE_EFFECT_CLASS_IDEMPOTENT,
    "queryable": pb.SIDE_EFFECT_CLASS_QUERYABLE,
    "non_idempotent": pb.SIDE_EFFECT_CLASS_NON_IDEMPOTENT,
}


class Activation:
    def __init__(
        self,
        address: str,
        run_id: str,
        run_attempt_id: str,
        callback_token: str,
        request: Request,
        classifier: Classifier | None = None,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        budget_threshold: float = 0.8,
        timeout_s: float = 30.0,
        criteria: Sequence[pb.CriterionDraft] = (),
    ) -> None:
        self.credential = pb.AttemptCredential(
            run_id=run_id, run_attempt_id=run_attempt_id, callback_token=callback_token
        )
        self.request = request
        self.classifier: Classifier = classifier or RuleClassifier()
        self.budget_threshold = budget_threshold
        #: the long task's criteria if it is promoted (with checkers); else in words
        self.criteria = list(criteria)
        self.long_task_id = request.long_task_id
        self.preflights = 0  # how many preflights truerun asked for (RPC answers)
        self._done: list[tuple[ToolCall, pb.Receipt | None]] = []
        self._address, self._credentials, self._timeout_s = address, credentials, timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None

    async def __aenter__(self) -> Activation:
        if self._credentials is not None:
            self._channel = grpc.aio.secure_channel(self._address, self._credentials)
        else:
            self._channel = grpc.aio.insecure_channel(self._address)
        self._stub = long_task_service_pb2_grpc.RunPromotionServiceStub(self._channel)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = self._stub = None

    @property
    def promoted(self) -> bool:
        return bool(self.long_task_id)

    async def _call(self, method: str, request: Any) -> Any:
        if self._stub is None:
            raise RuntimeError("the activation is not open: use `async with activation:`")
        try:
            return await getattr(self._stub, method)(request, timeout=self._timeout_s)
        except grpc.RpcError as rpc_error:
            raise from_rpc(rpc_error) from None

    async def begin(self, plan: Sequence[pb.StepDraft] = (), criteria: Sequence[str] = ()) -> str:
        """Path A, before any tool runs: a forced request or one stating multi-day intent
        becomes a long task now (``plan``: its steps). A continuation that carries a task id
        is that task already. Returns the task id, or "" (an ordinary run goes on)."""
        if self.promoted or self.request.suppress:
            return self.long_task_id
        if self.request.force:
            why = "the user asked for a long task"
        elif self.classifier.multi_day(self.request):
            why = "the request states multi-day intent"
        else:
            return ""
        await self._promote(pb.ACTIVATION_PATH_DETERMINISTIC, why, None, plan, criteria)
        return self.long_task_id

    async def before_tool(
        self,
        call: ToolCall,
        plan: Sequence[pb.StepDraft] = (),
        then: Sequence[pb.StepDraft] = (),
    ) -> str:
        """Before ``call`` runs: ALLOWED (run it as an ordinary run's call) or PROMOTED (the
        run is now a long task; ``call`` is its first remaining step, after ``plan``'s own
        steps if given, followed by ``then``'s). Pure calls and a suppressing request never
        ask truerun."""
        if self.promoted:
            return PROMOTED
        if call.tier == "pure" or self.request.suppress:
            return ALLOWED
        asked = pb.PreflightToolCallRequest(credential=self.credential, tier=_TIER[call.tier])
        answer = await self._call("PreflightToolCall", asked)
        if answer.long_task_id:
            self.long_task_id = answer.long_task_id
            return PROMOTED
        if not answer.preflight_needed:
            return ALLOWED
        self.preflights += 1
        executed = [c for c, _ in self._done]
        verdict = self.classifier.classify(self.request, call, executed)
        told = pb.RecordClassificationRequest(
            credential=self.credential,
            tier=_TIER[call.tier],
            verdict=pb.ACTIVATION_VERDICT_PROMOTE
            if verdict.promote
            else pb.ACTIVATION_VERDICT_ORDINARY,
            reason=verdict.reason[:1024],
            confidence=verdict.confidence,
        )
        await self._call("RecordClassification", told)
        if not verdict.promote:
            return ALLOWED
        steps = [*plan, step_draft(call), *then]
        await self._promote(
            pb.ACTIVATION_PATH_LAZY, verdict.reason, verdict, steps, verdict.criteria
        )
        return PROMOTED

    def executed(self, call: ToolCall, receipt: pb.Receipt | None = None) -> None:
        """A call that ran, with what the outside world answered (None: no receipt came)."""
        self._done.append((call, receipt))

    async def spent(
        self, fraction: float, unfinished: bool, plan: Sequence[pb.StepDraft] = ()
    ) -> bool:
        """The run used ``fraction`` of its budget; past the threshold with multi-stage work
        unfinished it becomes a long task without a classification. True: promoted."""
        if self.promoted or self.request.suppress:
            return self.promoted
        if fraction < self.budget_threshold or not unfinished:
            return False
        why = f"{fraction:.0%} of the run's budget spent with work unfinished"
        await self._promote(pb.ACTIVATION_PATH_BUDGET, why, None, plan, ())
        return True

    async def plan_proposed(self, plan: Sequence[pb.StepDraft], waits: bool = False) -> bool:
        """The model proposed ``plan``: several dependent stages, or one waiting for an
        approval or a person, becomes a long task without a classification."""
        if self.promoted or self.request.suppress:
            return self.promoted
        if len(plan) < 2 and not waits:
            return False
        why = "the model proposed a multi-stage plan" + (" with waits" if waits else "")
        await self._promote(pb.ACTIVATION_PATH_PLAN, why, None, plan, ())
        return True

    async def _promote(
        self,
        path: int,
        reason: str,
        verdict: Classification | None,
        plan: Sequence[pb.StepDraft],
        criteria: Sequence[str],
    ) -> None:
        goal = (verdict.goal if verdict else "") or self.request.text
        texts = list(criteria) or ["what the user asked for is done"]
        draft = pb.LongTaskDraft(
            goal=goal[:4000],
            steps=list(plan),
            criteria=self.criteria
            or [
                pb.CriterionDraft(criterion_id=f"c{n}", text=text)
                for n, text in enumerate(texts, 1)
            ],
        )
        absorbed = [_absorbed(call, receipt) for call, receipt in self._done]
        request = pb.PromoteRunRequest(
            credential=self.credential,
            long_task=draft,
            absorbed=absorbed,
            path=path,  # type: ignore[arg-type]
            reason=reason[:1024],
        )
        if verdict is not None:
            request.confidence = verdict.confidence
        answer = await self._call("PromoteRun", request)
        self.long_task_id = answer.long_task_id


def step_draft(call: ToolCall) -> pb.StepDraft:
    """The step a call becomes in a long task's plan (its action, if the call declares one)."""
    step = pb.StepDraft(
        step_id=call.step_id,
        title=call.title,
        side_effect=_TIER[call.tier],
        idempotency_key=call.idempotency_key,
        input_summary=call.summary,
    )
    if call.action:
        step.action.update(dict(call.action))
    return step


def _absorbed(call: ToolCall, receipt: pb.Receipt | None) -> pb.AbsorbedCall:
    absorbed = pb.AbsorbedCall(
        step_id=call.step_id,
        title=call.title,
        side_effect=_TIER[call.tier],
        target=call.target,
        summary=call.summary,
        idempotency_key=call.idempotency_key,
    )
    if receipt is not None:
        absorbed.receipt.CopyFrom(receipt)
    return absorbed


def receipt(target: str, summary: str, at_ms: int, external_id: str = "") -> pb.Receipt:
    """A receipt as ``executed`` takes it."""
    time = timestamp_pb2.Timestamp()
    time.FromMilliseconds(at_ms)
    return pb.Receipt(external_id=external_id, target=target, time=time, summary=summary)
