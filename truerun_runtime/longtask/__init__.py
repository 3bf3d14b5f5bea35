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

from .activation import ALLOWED, PROMOTED, Activation, receipt
from .attempt import AttemptConfigError, LongTaskAttempt, evidence
from .checkers import CHECKERS, CheckResult, run_checker
from .classifier import Classification, Classifier, Request, RuleClassifier, ToolCall
from .errors import (
    LeaseNotHeld,
    LongTaskError,
    PromotionFailed,
    PromotionRefused,
    TransitionRefused,
    Unauthenticated,
    VersionConflict,
)
from .step import StepContext
from .verify import check_criteria

__all__ = [
    "ALLOWED",
    "CHECKERS",
    "PROMOTED",
    "Activation",
    "AttemptConfigError",
    "CheckResult",
    "Classification",
    "Classifier",
    "LeaseNotHeld",
    "LongTaskAttempt",
    "LongTaskError",
    "PromotionFailed",
    "PromotionRefused",
    "Request",
    "RuleClassifier",
    "StepContext",
    "ToolCall",
    "TransitionRefused",
    "Unauthenticated",
    "VersionConflict",
    "check_criteria",
    "evidence",
    "receipt",
    "run_checker",
]
