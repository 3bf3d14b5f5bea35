"""The tool runner (``python -m truerun_runtime.longtask tools``): an ordinary run whose spec
declares tool calls (``toolspec.py``), run by the reference agent through the activation SDK
(docs/long-tasks.md "Activation and promotion", section 10).

The calls run in order, each a shell command (its idempotency key in
TRUERUN_IDEMPOTENCY_KEY). Before a call that is not pure the runner asks truerun
(``Activation.before_tool`` with the default ``RuleClassifier``): only at a tier's first
call does truerun ask for a preflight and the classifier decide. A call that ran is kept
with its receipt (the JSON line it printed, ``"receipt": "json"``; else its exit 0, saying
so). On a promotion ``PromoteRun`` absorbs the executed prefix with those receipts, the
call about to run and the rest become the long task's remaining steps, and this process
goes on as the task's attempt (``LongTaskAttempt``, the same credential) through the step
driver: no call runs twice. A forced or multi-day request is a long task before any call
(``begin``); a declared ``plan`` is proposed after the calls (``plan_proposed``).

Exit status as the step driver's: 0 done, 1 a call (or step) failed, 2 not runnable, 3
truerun refused (a promotion refused or failed: the run must stop).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from google.protobuf import struct_pb2
from truerun.v1 import long_task_service_pb2 as pb

from .actions import RECEIPT_JSON, ReceiptError, parse_receipt
from .activation import PROMOTED, Activation, receipt, step_draft
from .attempt import ENV_ATTEMPT, ENV_RUN, ENV_TOKEN, AttemptConfigError, LongTaskAttempt
from .classifier import RuleClassifier
from .commands import run_shell
from .driver import IDEMPOTENCY_ENV, NOT_RUNNABLE, OK, REFUSED, STEP_FAILED, StepDriver
from .errors import LongTaskError
from .toolspec import TOOLS_ENV, Criterion, DeclaredStep, ToolSpecError, ToolsSpec, parse_tools

log = logging.getLogger(__name__)


class ToolRunner:
    def __init__(
        self,
        spec: ToolsSpec,
        attempt: LongTaskAttempt,
        *,
        cwd: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        credential = attempt.credential
        self.run_id = credential.run_id
        self.spec = replace(
            spec,
            calls=tuple(self._keyed(s) for s in spec.calls),
            plan=tuple(self._keyed(s) for s in spec.plan),
        )
        self.attempt = attempt
        self.activation = Activation(
            attempt.address,
            credential.run_id,
            credential.run_attempt_id,
            credential.callback_token,
            spec.request,
            RuleClassifier(),
            credentials=attempt.channel_credentials,
            criteria=[_criterion(c) for c in spec.criteria],
        )
        self.cwd = cwd
        self.env = dict(os.environ if env is None else env)
        for secret in (ENV_TOKEN, TOOLS_ENV):  # the attempt's, not the commands'
            self.env.pop(secret, None)

    def _keyed(self, step: DeclaredStep) -> DeclaredStep:
        """A call with an effect gets a key of its run unless it declares one."""
        if step.tier == "pure" or step.idempotency_key:
            return step
        return replace(step, idempotency_key=f"{self.run_id}:{step.step_id}")

    async def run(self) -> int:
        try:
            async with self.activation:
                return await self._run()
        except LongTaskError as error:  # refused or failed promotion: the run must stop
            log.error("truerun refused: %s", error)
            return REFUSED

    async def _run(self) -> int:
        a, calls, plan = self.activation, self.spec.calls, self.spec.plan
        drafts = [step_draft(s.call()) for s in self.spec.steps]
        if await a.begin(plan=drafts):
            log.info("the request is a long task before any call: %s", a.long_task_id)
            return await self._as_long_task()
        code = await self._calls(calls, drafts, 0)
        if code is not None:
            return code
        waits = any(s.waits for s in plan)
        if plan and await a.plan_proposed(drafts[len(calls) :], waits=waits):
            return await self._as_long_task()
        # a plan that made no long task (one stage waiting for nothing, or a suppressed
        # request): its stages are more calls of this run
        code = await self._calls(plan, drafts, len(calls))
        if code is not None:
            return code
        steps = len(calls) + len(plan)
        log.info("%d calls ran as an ordinary run (%d preflights)", steps, a.preflights)
        return OK

    async def _calls(
        self, steps: tuple[DeclaredStep, ...], drafts: list[pb.StepDraft], offset: int
    ) -> int | None:
        """Runs ``steps`` as the run's calls; None when all ran, else the exit status (a
        promotion hands the rest to the step driver, whose status it is)."""
        for n, step in enumerate(steps, offset):
            if await self.activation.before_tool(step.call(), then=drafts[n + 1 :]) == PROMOTED:
                return await self._as_long_task()
            if step.waits:
                log.error(
                    "step %s waits for a person or a time: only a long task can", step.step_id
                )
                return NOT_RUNNABLE
            code = await self._execute(step)
            if code != OK:
                return code
        return None

    async def _execute(self, step: DeclaredStep) -> int:
        call = step.call()
        env = dict(self.env)
        if step.idempotency_key:
            env[IDEMPOTENCY_ENV] = step.idempotency_key
        prepare = step.action.get("prepare")
        if prepare and not (await run_shell(str(prepare), cwd=self.cwd, env=env)).ok:
            log.error("call %s: its preparation failed", step.step_id)
            return STEP_FAILED
        result = await run_shell(str(step.action["run"]), cwd=self.cwd, env=env)
        if not result.ok:
            log.error("call %s exited %d", step.step_id, result.exit_code)
            return STEP_FAILED
        if step.action.get("receipt") == RECEIPT_JSON:
            try:
                said = parse_receipt(result.stdout, default_target=call.target)
            except ReceiptError as error:
                log.error("call %s: %s", step.step_id, error)
                return STEP_FAILED
            got = receipt(said.target, said.summary, said.at_ms, said.external_id)
        else:  # as the step driver records it: the command's exit 0 is all it said
            now_ms = int(time.time() * 1000)
            got = receipt(call.target, "the command exited 0 (it declares no receipt)", now_ms)
        self.activation.executed(call, got)
        log.info("call %s (%s) ran: %s", step.step_id, step.tier, got.summary)
        return OK

    async def _as_long_task(self) -> int:
        """The run is the long task's attempt now: the step driver runs what is left."""
        async with self.attempt:
            return await StepDriver(self.attempt, cwd=self.cwd, env=self.env).run()


def _criterion(criterion: Criterion) -> pb.CriterionDraft:
    draft = pb.CriterionDraft(
        criterion_id=criterion.criterion_id,
        text=criterion.text,
        checker_kind=criterion.checker_kind,
    )
    if criterion.checker:
        checker = struct_pb2.Struct()
        checker.update(criterion.checker)
        draft.checker.CopyFrom(checker)
    return draft


async def run_tools(env: Mapping[str, str] | None = None) -> int:
    """The runner as the agent starts it: the section in TRUERUN_TOOLS, the run attempt's
    credential in TRUERUN_RUN_ID, TRUERUN_ATTEMPT_ID, TRUERUN_CALLBACK_TOKEN."""
    env = os.environ if env is None else env
    try:
        spec = parse_tools(json.loads(env.get(TOOLS_ENV, "")))
        attempt = LongTaskAttempt.from_env(env)
    except json.JSONDecodeError as error:
        log.error("%s is not JSON: %s", TOOLS_ENV, error.msg)
        return NOT_RUNNABLE
    except (ToolSpecError, AttemptConfigError, ValueError) as error:
        log.error("not runnable: %s", error)
        return NOT_RUNNABLE
    log.info("run %s attempt %s: %d calls", env.get(ENV_RUN), env.get(ENV_ATTEMPT), len(spec.calls))
    return await ToolRunner(spec, attempt, cwd=Path.cwd(), env=env).run()
