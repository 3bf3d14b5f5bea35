"""One step of the attempt, as an async context (``attempt.step(step_id)``).

The order of calls is the contract (docs/runtime-protocol.md, "Long tasks"):

    async with attempt.step("send") as step:          # BeginStep (the step's version)
        await step.intent(target, summary)            # RecordIntent, BEFORE the effect
        answer = do_the_effect()                      # the effect itself
        await step.receipt(target, at_ms, summary)    # RecordReceipt, after it
        await step.complete(evidence=[...])           # CompleteStep

Every answer carries the step's new version; the context keeps it, so the next call sends
the right one. Leaving the context with an exception after an intent marks the step
uncertain (the effect may have happened: recovery decides, the SDK never retries it);
before any intent it blocks the step (nothing was attempted, it may begin again).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from google.protobuf import struct_pb2, timestamp_pb2
from truerun.v1 import long_task_service_pb2 as pb

from .errors import LongTaskError

if TYPE_CHECKING:
    from .attempt import LongTaskAttempt

log = logging.getLogger(__name__)

#: the states in which the step is no longer this context's to settle
_SETTLED = frozenset(
    {
        pb.STEP_STATE_COMPLETED,
        pb.STEP_STATE_UNCERTAIN,
        pb.STEP_STATE_BLOCKED,
        pb.STEP_STATE_SKIPPED,
        pb.STEP_STATE_FAILED,
    }
)


class StepContext:
    """The attempt's hold on one step: its version, its try's intent and receipt."""

    def __init__(self, attempt: LongTaskAttempt, step_id: str, *, begin: bool = True) -> None:
        self.attempt = attempt
        self.step_id = step_id
        self._begin = begin
        self.record: pb.LongTaskStep | None = None
        self.task_state = pb.LONG_TASK_STATE_UNSPECIFIED
        #: the side effect record of this try's intent ("" until the intent)
        self.effect_id = ""
        self.intent_recorded = False
        self.receipt_recorded = False

    @property
    def version(self) -> int:
        if self.record is None:
            raise RuntimeError(f"step {self.step_id} was not begun")
        return self.record.version

    @property
    def state(self) -> int:
        return self.record.state if self.record is not None else pb.STEP_STATE_UNSPECIFIED

    @property
    def intent_open(self) -> bool:
        """An intent without its receipt: the effect may have happened."""
        return self.intent_recorded and not self.receipt_recorded

    # -- the context ---------------------------------------------------------------------------

    async def __aenter__(self) -> StepContext:
        if self.attempt.last_briefing is None:
            await self.attempt.briefing()
        self.record = self.attempt.step_record(self.step_id)
        if self._begin:
            await self._act(
                self.attempt.stub().BeginStep,
                pb.BeginStepRequest(
                    credential=self.attempt.credential,
                    step_id=self.step_id,
                    step_version=self.version,
                ),
            )
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.state in _SETTLED or self.attempt.lease_lost:
            return
        if error is None:
            why = "the step context ended without completing the step"
        else:
            why = f"{type(error).__name__}: {error}"[:1000]
        try:
            if self.intent_recorded:
                # an intent was recorded: the effect may have happened (with a receipt, the
                # receipt proves it and recovery completes the step from it)
                await self.uncertain(why)
            else:
                await self.block(why)
        except LongTaskError as failure:
            log.error("step %s could not be settled (%s): %s", self.step_id, why, failure)

    # -- step actions --------------------------------------------------------------------------

    async def intent(self, target: str, summary: str, idempotency_key: str | None = None) -> str:
        """Records what the effect will do, BEFORE it starts; returns the effect's record id.
        ``idempotency_key``: the key the effect is made with (default: the step's own). An
        idempotent step's effect is made with the step's own key, on every attempt: truerun
        refuses another key (INVALID_ARGUMENT), so give none or that one."""
        ack = await self._act(
            self.attempt.stub().RecordIntent,
            pb.RecordIntentRequest(
                credential=self.attempt.credential,
                step_id=self.step_id,
                step_version=self.version,
                target=target,
                summary=summary,
                idempotency_key=idempotency_key or "",
            ),
        )
        self.intent_recorded = True
        self.effect_id = ack.made_id or ack.step.current_effect.effect_id
        return self.effect_id

    async def receipt(
        self,
        target: str,
        at_ms: int,
        summary: str,
        external_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> pb.StepAck:
        """Records what the outside world answered (its id, its timestamp), after the effect."""
        time = timestamp_pb2.Timestamp()
        time.FromMilliseconds(int(at_ms))
        struct = struct_pb2.Struct()
        if detail:
            struct.update(dict(detail))
        ack = await self._act(
            self.attempt.stub().RecordReceipt,
            pb.RecordReceiptRequest(
                credential=self.attempt.credential,
                step_id=self.step_id,
                step_version=self.version,
                receipt=pb.Receipt(
                    external_id=external_id or "",
                    target=target,
                    time=time,
                    summary=summary,
                    detail=struct,
                ),
            ),
        )
        self.receipt_recorded = True
        return ack

    async def probe(self, result: int) -> pb.StepAck:
        """What the step's read-only probe found (pb.PROBE_RESULT_DONE / NOT_DONE / UNKNOWN)."""
        return await self._act(
            self.attempt.stub().RecordProbe,
            pb.RecordProbeRequest(
                credential=self.attempt.credential,
                step_id=self.step_id,
                step_version=self.version,
                result=result,  # type: ignore[arg-type]
            ),
        )

    async def complete(self, evidence: Sequence[pb.EvidenceRef] = ()) -> pb.StepAck:
        """Completes the step with references to its evidence (a receipt counts as one)."""
        return await self._act(
            self.attempt.stub().CompleteStep,
            pb.CompleteStepRequest(
                credential=self.attempt.credential,
                step_id=self.step_id,
                step_version=self.version,
                evidence=list(evidence),
            ),
        )

    async def uncertain(self, reason: str) -> pb.StepAck:
        """The effect may or may not have happened: recovery decides from the record."""
        return await self._reasoned(
            self.attempt.stub().MarkStepUncertain, pb.MarkStepUncertainRequest, reason
        )

    async def block(self, reason: str) -> pb.StepAck:
        """Nothing was attempted and the step cannot go on (refused after an intent)."""
        return await self._reasoned(self.attempt.stub().BlockStep, pb.BlockStepRequest, reason)

    async def fail(self, reason: str) -> pb.StepAck:
        """A failure boundary: the plan stops here (a new plan version or a person decides)."""
        return await self._reasoned(self.attempt.stub().FailStep, pb.FailStepRequest, reason)

    async def skip(self, reason: str) -> pb.StepAck:
        """The step is not needed."""
        return await self._reasoned(self.attempt.stub().SkipStep, pb.SkipStepRequest, reason)

    async def _reasoned(self, method: Any, request_type: Any, reason: str) -> pb.StepAck:
        request = request_type(
            credential=self.attempt.credential,
            step_id=self.step_id,
            step_version=self.version,
            reason=reason,
        )
        return await self._act(method, request)

    async def _act(self, method: Any, request: Any) -> pb.StepAck:
        ack: pb.StepAck = await self.attempt.call(method, request)
        if ack.HasField("step"):
            self.record = ack.step
        self.task_state = ack.state
        return ack
