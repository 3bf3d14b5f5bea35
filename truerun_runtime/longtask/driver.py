"""The step driver (``python -m truerun_runtime.longtask``): runs a long-task attempt whose
steps are declared commands (``actions.py``), through the SDK's step context.

The loop: read the briefing; work on its current step; read it again; when no step is left,
declare the steps done, run the runtime's checkers and record their verdicts. For a step:

- a continuation (``continue``): the attempt asks truerun for its next attempt later
  (``ContinueLater``) and ends; the attempt the continuation starts completes the step and
  goes on;
- a question (``ask``): its answer, once a person gave it, completes the step (evidence:
  the answer); until then the question is asked and the attempt ends;
- uncertain and queryable, not probed in this try: the probe runs (read-only) and is
  recorded; the door then allows completing it (done) or beginning it again (not done);
- otherwise the step is begun (pending, blocked, or uncertain where the door grants a basis
  from its record: the driver never names one) and run:
  - ``pure``: the command runs; it completes with the command's evidence (exit code, output
    hash) and the written file's; a failing command blocks it (nothing outside was touched);
  - any other class: an approval first when declared (denied: the step is blocked and a
    person asked), then the intent, then the command (with TRUERUN_IDEMPOTENCY_KEY, the
    step's key: an idempotent step always has one; one stored without is put to a person),
    then the receipt it printed (``"receipt": "json"``; with ``"none"`` the command's exit 0 is
    recorded as the receipt, saying so), then completion citing the effect. A failure after
    the intent (an exit other than 0, no receipt, no written file) marks it uncertain:
    recovery decides; the driver never repeats an effect.

Exit status: 0 when the attempt did its part (verified, or waiting for a person), 1 when a
step failed (the run fails, the attempt ends, recovery decides), 2 when it was not started
as an attempt or its step cannot be read, 3 when truerun refused it (lease lost, a stale
version, a refused move).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from google.protobuf import json_format
from truerun.v1 import long_task_service_pb2 as pb

from .actions import (
    RECEIPT_JSON,
    Action,
    ActionError,
    CommandReceipt,
    ReceiptError,
    parse_action,
    parse_probe,
    parse_receipt,
)
from .attempt import LongTaskAttempt, evidence
from .commands import file_evidence, run_shell
from .continuing import WAITS_FOR
from .errors import LongTaskError
from .step import StepContext
from .verify import check_criteria

log = logging.getLogger(__name__)

OK, STEP_FAILED, NOT_RUNNABLE, REFUSED = 0, 1, 2, 3
IDEMPOTENCY_ENV = "TRUERUN_IDEMPOTENCY_KEY"
GRANT = "grant"
ASK = "step_question"  # the material's purpose of a question step's question
_PROBE = {0: pb.PROBE_RESULT_DONE, 1: pb.PROBE_RESULT_NOT_DONE}
_BEGINNABLE = (pb.STEP_STATE_PENDING, pb.STEP_STATE_BLOCKED, pb.STEP_STATE_UNCERTAIN)


class Stop(Exception):
    """The attempt stops here with ``code`` (the step is already settled as it must be)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


class StepDriver:
    def __init__(
        self, attempt: LongTaskAttempt, *, cwd: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.attempt = attempt
        self.cwd = cwd
        self.env = dict(os.environ if env is None else env)
        self.env.pop("TRUERUN_CALLBACK_TOKEN", None)  # the attempt's secret: not the commands'

    async def run(self) -> int:
        try:
            return await self._run()
        except Stop as stop:
            log.info("attempt stops: %s", stop)
            return stop.code
        except LongTaskError as error:
            log.error("truerun refused: %s", error)
            return REFUSED

    async def _run(self) -> int:
        seen: set[tuple[str, int, int]] = set()
        while True:
            briefing = await self.attempt.briefing()
            if briefing.state == pb.LONG_TASK_STATE_VERIFYING:
                return await self._verify(ready=True)
            if briefing.state != pb.LONG_TASK_STATE_RUNNING:
                log.info("the task is %s: nothing to do", pb.LongTaskState.Name(briefing.state))
                return OK
            if not briefing.current_step_id:
                return await self._verify(ready=False)
            step = self.attempt.step_record(briefing.current_step_id)
            key = (step.step_id, step.version, step.state)
            if key in seen:  # the step did not move: going on would loop
                raise Stop(REFUSED, f"step {step.step_id} did not move ({step.version})")
            seen.add(key)
            await self._step(briefing, step)

    # -- one step ------------------------------------------------------------------------------

    async def _step(self, briefing: pb.Briefing, step: pb.LongTaskStep) -> None:
        try:
            action = parse_action(json_format.MessageToDict(step.action))
            probe = parse_probe(json_format.MessageToDict(step.probe))
        except ActionError as error:
            await self._stuck(step, f"step {step.step_id} cannot run: {error}")
            return
        if action.is_question:
            await self._question(briefing, step, action)
            return
        if action.later is not None:
            await self._continue(briefing, step, action.later)
            return
        if (
            step.state == pb.STEP_STATE_UNCERTAIN
            and step.side_effect == pb.SIDE_EFFECT_CLASS_QUERYABLE
            and step.probe_result == pb.PROBE_RESULT_UNSPECIFIED
        ):
            await self._probe(step, probe)
            return
        if step.state not in _BEGINNABLE:
            # running already (its try may hold an intent): never run it a second time here;
            # the run ends, and recovery decides from the record
            raise Stop(NOT_RUNNABLE, f"step {step.step_id} is {pb.StepState.Name(step.state)}")
        if step.side_effect == pb.SIDE_EFFECT_CLASS_IDEMPOTENT and not step.idempotency_key.strip():
            # truerun refuses such a plan (and such an intent); a step stored before it did
            # is put to a person rather than run with an empty key, which would make its
            # retry a second effect (docs/long-tasks.md "3. Steps")
            await self._stuck(step, f"step {step.step_id} is idempotent but has no idempotency key")
            return
        side = pb.SideEffectClass.Name(step.side_effect).removeprefix("SIDE_EFFECT_CLASS_")
        log.info("step %s (%s): %s", step.step_id, side.lower(), step.title)
        async with self.attempt.step(step.step_id) as ctx:
            if action.prepare:
                await self._prepare(ctx, step, action.prepare)
            if step.side_effect == pb.SIDE_EFFECT_CLASS_PURE:
                await self._pure(ctx, step, action)
            else:
                await self._effect(ctx, step, action)

    async def _prepare(self, ctx: StepContext, step: pb.LongTaskStep, prepare: str) -> None:
        """The step's preparation, before any approval or intent: it touches nothing
        outside, so a failure blocks the step (it may simply run again)."""
        result = await run_shell(prepare, cwd=self.cwd, env=self.env)
        if not result.ok:
            await ctx.block(f"its preparation exited {result.exit_code}")
            raise Stop(STEP_FAILED, f"step {step.step_id}: preparation exited {result.exit_code}")

    async def _pure(self, ctx: StepContext, step: pb.LongTaskStep, action: Action) -> None:
        result = await run_shell(action.run, cwd=self.cwd, env=self.env)
        if not result.ok:
            # a pure step touched nothing outside: blocked, it may simply run again
            await ctx.block(f"the command exited {result.exit_code}")
            raise Stop(STEP_FAILED, f"step {step.step_id}: the command exited {result.exit_code}")
        proofs = [result.evidence()]
        if action.writes:
            proofs.append(await self._written(ctx, step, action.writes))
        await ctx.complete(proofs)

    async def _effect(self, ctx: StepContext, step: pb.LongTaskStep, action: Action) -> None:
        if action.approval and not await self._approved(ctx, step, action):
            return
        target = action.target or action.writes or step.title or step.step_id
        effect_id = await ctx.intent(target, step.title or action.run, step.idempotency_key or None)
        env = dict(self.env)
        env[IDEMPOTENCY_ENV] = step.idempotency_key
        result = await run_shell(action.run, cwd=self.cwd, env=env)
        if not result.ok:
            why = f"the command exited {result.exit_code} after its intent: it may have acted"
            await ctx.uncertain(why)
            raise Stop(STEP_FAILED, f"step {step.step_id}: {why}")
        proofs = [result.evidence(effect_id)]
        if action.writes:  # before the receipt: a missing file leaves the try unproven
            proofs.append(await self._written(ctx, step, action.writes, effect_id))
        if action.receipt == RECEIPT_JSON:
            try:
                receipt = parse_receipt(result.stdout, default_target=target)
            except ReceiptError as error:
                await ctx.uncertain(f"no receipt: {error}")
                raise Stop(STEP_FAILED, f"step {step.step_id}: {error}") from None
        else:
            # no receipt declared: the command's own success is all the outside world said;
            # recorded as such (an intent needs its receipt before the step may complete)
            receipt = CommandReceipt(
                target,
                "the command exited 0 (it declares no receipt)",
                int(time.time() * 1000),
                detail={"exit_code": 0, "source": "exit_code"},
            )
        await ctx.receipt(
            receipt.target, receipt.at_ms, receipt.summary, receipt.external_id, receipt.detail
        )
        proofs.append(
            evidence(
                "receipt",
                receipt.external_id or receipt.target,
                receipt.summary,
                render={"target": receipt.target, "at_ms": receipt.at_ms},
                effect_id=effect_id,
            )
        )
        await ctx.complete(proofs)
        log.info("step %s completed: %s", step.step_id, receipt.summary)

    async def _written(
        self, ctx: StepContext, step: pb.LongTaskStep, writes: str, effect_id: str = ""
    ) -> pb.EvidenceRef:
        path = Path(writes) if Path(writes).is_absolute() else self.cwd / writes
        if path.is_file():
            return file_evidence(path, effect_id)
        why = f"the command succeeded but wrote no file {path}"
        if ctx.intent_recorded:
            await ctx.uncertain(why)
        else:
            await ctx.block(why)
        raise Stop(STEP_FAILED, f"step {step.step_id}: {why}")

    async def _approved(self, ctx: StepContext, step: pb.LongTaskStep, action: Action) -> bool:
        """Asks for the approval BEFORE the intent: an attempt that dies waiting leaves no
        intent, so the step simply runs again. Denied: the step is blocked and a person is
        asked how to go on (the attempt ends)."""
        decision = await self.attempt.request_approval(
            action.approval,
            f"Step {step.step_id} ({step.title}) wants to: {action.approval}",
            {"step_id": step.step_id, "command": action.run},
        )
        if decision.state == "answered" and decision.answer == GRANT:
            return True
        why = f"approval of {action.approval!r} {decision.state}: {decision.answer or 'no answer'}"
        await ctx.block(why)
        await self._ask_after_block(step, why)
        return False

    # -- questions, probes, stops --------------------------------------------------------------

    async def _question(self, briefing: pb.Briefing, step: pb.LongTaskStep, action: Action) -> None:
        answered = _answer_for(briefing, step.step_id)
        if answered is None:
            material = {"step_id": step.step_id, "purpose": ASK}
            await self.attempt.request_decision(action.ask, action.options, material)
            raise Stop(OK, f"step {step.step_id} asked a person; the attempt ends")
        if step.state not in _BEGINNABLE:
            raise Stop(NOT_RUNNABLE, f"step {step.step_id} is {pb.StepState.Name(step.state)}")
        async with self.attempt.step(step.step_id) as ctx:
            await ctx.complete(
                [
                    evidence(
                        "answer",
                        answered.decision_id,
                        f"{answered.answered_by or 'a person'} answered {answered.answer!r}",
                    )
                ]
            )

    async def _continue(
        self, briefing: pb.Briefing, step: pb.LongTaskStep, later: pb.ContinuationSpec
    ) -> None:
        """A declared continuation. Reached first, the attempt asks for its next attempt
        later and ends (nothing may be running: the steps before it are settled). The attempt
        that continuation starts (its briefing says the previous attempt continued later
        for this step) completes the step and goes on. An attempt that dies in between makes
        the step wait once more: a wait is never skipped."""
        waits = WAITS_FOR.format(step_id=step.step_id)
        if waits in briefing.previous_failure:
            if step.state not in _BEGINNABLE:
                raise Stop(NOT_RUNNABLE, f"step {step.step_id} is {pb.StepState.Name(step.state)}")
            async with self.attempt.step(step.step_id) as ctx:
                said = f"attempt {briefing.attempt_no} started by its continuation"
                await ctx.complete([evidence("continuation", briefing.attempt_id, said)])
            log.info("step %s completed: %s", step.step_id, said)
            return
        asked = pb.ContinuationSpec()
        asked.CopyFrom(later)
        asked.reason = f"{waits}: {later.reason}" if later.reason else waits
        ack = await self.attempt.continue_later(asked)
        raise Stop(OK, f"step {step.step_id}: {ack.state_reason}")

    async def _probe(self, step: pb.LongTaskStep, probe: str) -> None:
        """The read-only probe of an uncertain queryable step, recorded; the door then allows
        completing it (done) or beginning it again (not done) on the basis it finds."""
        if not probe:
            raise Stop(NOT_RUNNABLE, f"step {step.step_id} is queryable but declares no probe")
        result = await run_shell(probe, cwd=self.cwd, env=self.env)
        found = _PROBE.get(result.exit_code, pb.PROBE_RESULT_UNKNOWN)
        log.info("step %s probed: %s", step.step_id, pb.ProbeResult.Name(found))
        async with self.attempt.step(step.step_id, begin=False) as ctx:  # uncertain: no begin
            await ctx.probe(found)
            if found == pb.PROBE_RESULT_DONE:
                await ctx.complete([evidence("probe", probe, "the probe found the effect done")])
        if found == pb.PROBE_RESULT_UNKNOWN:
            raise Stop(
                STEP_FAILED,
                f"step {step.step_id}: the probe could not tell (exit {result.exit_code})",
            )
        # not done: the next turn of the loop begins it again

    async def _stuck(self, step: pb.LongTaskStep, why: str) -> None:
        """A step that cannot run as declared: blocked (nothing was attempted) and a person
        asked; the attempt ends."""
        if step.state == pb.STEP_STATE_PENDING:  # blocked or uncertain: already not running
            async with self.attempt.step(step.step_id) as ctx:
                await ctx.block(why)
        await self._ask_after_block(step, why)

    async def _ask_after_block(self, step: pb.LongTaskStep, why: str) -> None:
        await self.attempt.request_decision(
            f"Step {step.step_id} ({step.title}) is blocked: {why}. How should the task go on?",
            ["retry", "revise the plan", "cancel"],
            {"step_id": step.step_id, "why": why},
        )
        raise Stop(OK, f"step {step.step_id} blocked; a person was asked")

    # -- verification --------------------------------------------------------------------------

    async def _verify(self, *, ready: bool) -> int:
        if not ready:
            await self.attempt.ready_for_verification()
        briefing = await self.attempt.briefing()
        verdicts = await check_criteria(briefing.criteria, cwd=self.cwd, env=self.env)
        ack = await self.attempt.record_verification(verdicts)
        state = pb.LongTaskState.Name(ack.state)
        log.info("verified (%d verdicts): %s %s", len(verdicts), state, ack.state_reason)
        if ack.state == pb.LONG_TASK_STATE_RUNNING:
            # a correction round: declared commands cannot correct themselves
            return STEP_FAILED
        return OK


def _answer_for(briefing: pb.Briefing, step_id: str) -> pb.Decision | None:
    """The newest answered question about this step (its material names the step)."""
    for decision in briefing.decisions:
        if decision.state != "answered" or decision.kind != "question":
            continue
        material = json_format.MessageToDict(decision.material)
        if material.get("step_id") == step_id and material.get("purpose") == ASK:
            return decision
    return None
