"""The runtime's side of long tasks (docs/long-tasks.md, docs/runtime-protocol.md "Long
tasks"): the SDK an attempt's process uses to talk to LongTaskAttemptService, the runtime's
read-only checkers, and (``python -m truerun_runtime.longtask``) the step driver that runs a
plan of declared command steps.

    async with LongTaskAttempt.from_env() as attempt:
        briefing = await attempt.briefing()
        async with attempt.step(briefing.current_step_id) as step:
            await step.intent("mailto:ana@example.com", "send the weekly report")
            receipt = send()                      # the effect, only after the intent
            await step.receipt("mailto:ana@example.com", receipt.at_ms, "sent", receipt.id)
            await step.complete()
"""

from __future__ import annotations

from .attempt import AttemptConfigError, LongTaskAttempt, evidence
from .checkers import CHECKERS, CheckResult, run_checker
from .errors import (
    LeaseNotHeld,
    LongTaskError,
    TransitionRefused,
    Unauthenticated,
    VersionConflict,
)
from .step import StepContext
from .verify import check_criteria

__all__ = [
    "CHECKERS",
    "AttemptConfigError",
    "CheckResult",
    "LeaseNotHeld",
    "LongTaskAttempt",
    "LongTaskError",
    "StepContext",
    "TransitionRefused",
    "Unauthenticated",
    "VersionConflict",
    "check_criteria",
    "evidence",
    "run_checker",
]
