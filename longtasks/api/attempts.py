"""LongTaskAttemptService over gRPC: the attempt holding a task's lease, its briefing and its
step actions. Not behind the bearer-token interceptor: every call carries the callback
token of its run's attempt (``credentials.py``), checked before anything else; the run maps
to its long-task attempt (``attempt_of_run``), and each call is one door method with that
attempt's id. The door checks the lease, the step's version and the rules; a refusal comes
back with its stable reason and nothing written (docs/long-tasks.md "API")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from truerun.v1 import long_task_service_pb2 as pb
from truerun.v1 import long_task_service_pb2_grpc

from coordinator.api import validation
from coordinator.api.convert import timestamp
from coordinator.api.errors import unary
from coordinator.store.base import RunReader
from kernel.errors import InvalidArgument
from kernel.ids import now_ms
from longtasks.api import drafts
from longtasks.api.briefing import briefing, judged, lease_expiry, server_side
from longtasks.api.continuations import continuation_from_proto
from longtasks.api.convert import decision_to_proto, enum_number, step_to_proto, task_state
from longtasks.api.credentials import AttemptAuth
from longtasks.domain.checks import attempt_verdict_refusal
from longtasks.domain.completion import Source
from longtasks.domain.model import Attempt
from longtasks.domain.states import CriterionResult, ProbeResult
from longtasks.service.door import LongTaskDoor
from longtasks.service.evidence_reader import EvidenceReader
from longtasks.service.inputs import Changed, Intent, VerdictIn
from longtasks.service.judge import Judge
from longtasks.service.reads import TaskReads, TaskView
from longtasks.service.usage import MAX_TOKENS_PER_REPORT

Ctx = grpc.aio.ServicerContext[Any, Any]
MAX_VERDICTS = 100
_PROBES = {
    enum_number(pb.ProbeResult, "PROBE_RESULT", p): p
    for p in ProbeResult
    if p is not ProbeResult.NOT_PROBED  # UNSPECIFIED on the wire: not a result to record
}
_RESULTS = {enum_number(pb.CriterionResult, "CRITERION_RESULT", r): r for r in CriterionResult}


def _step_id(value: str) -> str:
    return validation.name(value, "step_id") or ""


def _why(value: str) -> str:
    return drafts.text(value, "reason", 1024)


class LongTaskAttemptServicer(long_task_service_pb2_grpc.LongTaskAttemptServiceServicer):
    def __init__(
        self,
        door: LongTaskDoor,
        reads: TaskReads,
        runs: RunReader,
        evidence: EvidenceReader,
        judge: Judge | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._door = door
        self._reads = reads
        self._auth = AttemptAuth(runs, reads, clock)
        self._judge = judge
        self._evidence = evidence

    async def _step_ack(self, changed: Changed) -> pb.StepAck:
        view = await self._reads.view(changed.task.id)
        step = next(
            (s for s in view.steps if changed.step and s.step_id == changed.step.step_id), None
        )
        return pb.StepAck(
            step=step_to_proto(step, view) if step is not None else None,
            state=task_state(changed.task),
            made_id=changed.made or "",
        )

    def _task_ack(self, changed: Changed, attempt: Attempt) -> pb.TaskAck:
        expires = lease_expiry(changed.task, attempt)
        return pb.TaskAck(
            state=task_state(changed.task),
            state_reason=changed.task.state_reason,
            lease_expire_time=timestamp(expires) if expires is not None else None,
        )

    @unary
    async def GetBriefing(self, request: pb.GetBriefingRequest, context: Ctx) -> pb.Briefing:
        attempt = await self._auth.attempt(request.credential)
        return briefing(await self._reads.view(attempt.task_id), attempt)

    @unary
    async def BeginStep(self, request: pb.BeginStepRequest, context: Ctx) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        step_id = _step_id(request.step_id)
        changed = await self._door.begin_step(a.task_id, a.id, step_id, request.step_version)
        return await self._step_ack(changed)

    @unary
    async def RecordIntent(self, request: pb.RecordIntentRequest, context: Ctx) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        intent = Intent(
            target=drafts.text(request.target, "target", required=True),
            summary=drafts.text(request.summary, "summary", required=True),
            idempotency_key=drafts.text(request.idempotency_key, "idempotency_key", 256) or None,
        )
        step_id = _step_id(request.step_id)
        changed = await self._door.record_intent(
            a.task_id, a.id, step_id, request.step_version, intent
        )
        return await self._step_ack(changed)

    @unary
    async def RecordReceipt(self, request: pb.RecordReceiptRequest, context: Ctx) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        receipt = drafts.receipt_in(request.receipt)
        step_id = _step_id(request.step_id)
        changed = await self._door.record_receipt(
            a.task_id, a.id, step_id, request.step_version, receipt
        )
        return await self._step_ack(changed)

    @unary
    async def RecordProbe(self, request: pb.RecordProbeRequest, context: Ctx) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        result = _PROBES.get(request.result)
        if result is None:
            raise InvalidArgument("result must be done, not_done or unknown")
        step_id = _step_id(request.step_id)
        changed = await self._door.record_probe(
            a.task_id, a.id, step_id, request.step_version, result
        )
        return await self._step_ack(changed)

    @unary
    async def CompleteStep(self, request: pb.CompleteStepRequest, context: Ctx) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        evidence = drafts.evidence_in(request.evidence)
        step_id = _step_id(request.step_id)
        changed = await self._door.complete_step(
            a.task_id, a.id, step_id, request.step_version, evidence
        )
        return await self._step_ack(changed)

    @unary
    async def MarkStepUncertain(
        self, request: pb.MarkStepUncertainRequest, context: Ctx
    ) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        changed = await self._door.mark_uncertain(
            a.task_id, a.id, _step_id(request.step_id), request.step_version, _why(request.reason)
        )
        return await self._step_ack(changed)

    @unary
    async def BlockStep(self, request: pb.BlockStepRequest, context: Ctx) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        changed = await self._door.block_step(
            a.task_id, a.id, _step_id(request.step_id), request.step_version, _why(request.reason)
        )
        return await self._step_ack(changed)

    @unary
    async def FailStep(self, request: pb.FailStepRequest, context: Ctx) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        changed = await self._door.fail_step(
            a.task_id, a.id, _step_id(request.step_id), request.step_version, _why(request.reason)
        )
        return await self._step_ack(changed)

    @unary
    async def SkipStep(self, request: pb.SkipStepRequest, context: Ctx) -> pb.StepAck:
        a = await self._auth.attempt(request.credential)
        changed = await self._door.skip_step(
            a.task_id, a.id, _step_id(request.step_id), request.step_version, _why(request.reason)
        )
        return await self._step_ack(changed)

    @unary
    async def RequestDecision(
        self, request: pb.RequestDecisionRequest, context: Ctx
    ) -> pb.DecisionAck:
        a = await self._auth.attempt(request.credential)
        changed = await self._door.request_decision(
            a.task_id,
            a.id,
            drafts.text(request.question, "question", required=True),
            drafts.texts(request.options, "options"),
            drafts.json_text(request.material, "material"),
        )
        assert changed.decision is not None
        return pb.DecisionAck(
            decision=decision_to_proto(changed.decision), state=task_state(changed.task)
        )

    @unary
    async def RequestApproval(
        self, request: pb.RequestApprovalRequest, context: Ctx
    ) -> pb.DecisionAck:
        a = await self._auth.attempt(request.credential)
        changed = await self._door.request_approval(
            a.task_id,
            a.id,
            drafts.text(request.subject, "subject", required=True),
            drafts.text(request.question, "question", required=True),
            drafts.json_text(request.material, "material"),
        )
        assert changed.decision is not None
        return pb.DecisionAck(
            decision=decision_to_proto(changed.decision), state=task_state(changed.task)
        )

    @unary
    async def GetDecision(self, request: pb.GetDecisionRequest, context: Ctx) -> pb.Decision:
        a = await self._auth.attempt(request.credential)
        decision_id = validation.name(request.decision_id, "decision_id") or ""
        return decision_to_proto(await self._reads.decision(a.task_id, decision_id))

    @unary
    async def ReadyForVerification(
        self, request: pb.ReadyForVerificationRequest, context: Ctx
    ) -> pb.TaskAck:
        a = await self._auth.attempt(request.credential)
        return self._task_ack(await self._door.ready_for_verification(a.task_id, a.id), a)

    @unary
    async def ContinueLater(self, request: pb.ContinueLaterRequest, context: Ctx) -> pb.TaskAck:
        """The attempt ends; its task waits for the continuation (docs/long-tasks.md
        "Continuations and catch-up")."""
        a = await self._auth.attempt(request.credential)
        asked = continuation_from_proto(request.continuation, a.task_id, now_ms())
        return self._task_ack(await self._door.continue_later(a.task_id, a.id, asked), a)

    @unary
    async def RecordVerification(
        self, request: pb.RecordVerificationRequest, context: Ctx
    ) -> pb.TaskAck:
        a = await self._auth.attempt(request.credential)
        view = await self._reads.view(a.task_id)
        attempt_verdicts = _attempt_verdicts(view, request.verdicts)
        # the one place verdicts are put together: the attempt's (runtime checkers only),
        # the server checkers' over the stored record, and a configured judge's
        verdicts = attempt_verdicts + server_side(view) + await judged(view, self._judge)
        changed = await self._door.record_verification(a.task_id, a.id, verdicts)
        return self._task_ack(changed, a)

    @unary
    async def RenewLease(self, request: pb.RenewLeaseRequest, context: Ctx) -> pb.TaskAck:
        a = await self._auth.attempt(request.credential)
        expires = await self._door.renew_lease(a.task_id, a.id)
        task = await self._reads.task(a.task_id)
        return pb.TaskAck(
            state=task_state(task),
            state_reason=task.state_reason,
            lease_expire_time=timestamp(expires),
        )

    @unary
    async def ReportUsage(self, request: pb.ReportUsageRequest, context: Ctx) -> pb.TaskAck:
        """Tokens the attempt spent, counted once per usage id (``usage.py``)."""
        a = await self._auth.attempt(request.credential)
        usage_id = validation.name(request.usage_id, "usage_id") or ""
        if not 0 < request.tokens <= MAX_TOKENS_PER_REPORT:
            raise InvalidArgument(f"tokens must be between 1 and {MAX_TOKENS_PER_REPORT}")
        changed = await self._door.report_usage(a.task_id, a.id, usage_id, request.tokens)
        return self._task_ack(changed, a)

    @unary
    async def ReadEvidence(
        self, request: pb.ReadEvidenceRequest, context: Ctx
    ) -> pb.EvidenceContent:
        a = await self._auth.attempt(request.credential)
        evidence_id = validation.name(request.evidence_id, "evidence_id") or ""
        got = await self._evidence.read(a, evidence_id, request.offset, request.max_bytes)
        return pb.EvidenceContent(
            evidence_id=got.evidence.id,
            kind=got.evidence.kind,
            summary=got.evidence.summary,
            content=got.content,
            truncated=got.truncated,
            truncated_by=got.truncated_by,
            total_bytes=got.total_bytes,
            untrusted=got.untrusted,
            unavailable_reason=got.unavailable_reason,
            next_offset=got.next_offset,
            attempt_bytes_left=got.attempt_bytes_left,
        )


def _attempt_verdicts(view: TaskView, verdicts: Any) -> list[VerdictIn]:
    """The attempt's verdicts, each for its criterion's runtime checker only: a verdict
    claiming a server checker, a judge or a person is INVALID_ARGUMENT."""
    if len(verdicts) > MAX_VERDICTS:
        raise InvalidArgument(f"at most {MAX_VERDICTS} verdicts in one call")
    records = {c.criterion.id: c for c in view.criteria}
    out = []
    for verdict in verdicts:
        refused = attempt_verdict_refusal(records.get(verdict.criterion_id), verdict.source)
        if refused is not None:
            raise InvalidArgument(
                f"verdict on {verdict.criterion_id!r}: {refused}",
                criterion_id=verdict.criterion_id[:128],
            )
        result = _RESULTS.get(verdict.result)
        if result is None:
            raise InvalidArgument(f"verdict on {verdict.criterion_id}: result is required")
        cited = tuple(
            validation.name(c, "cited_evidence_ids") or "" for c in verdict.cited_evidence_ids
        )
        out.append(
            VerdictIn(
                verdict.criterion_id,
                Source.CHECKER,
                result,
                drafts.evidence_in(verdict.evidence),
                cited,
            )
        )
    return out
