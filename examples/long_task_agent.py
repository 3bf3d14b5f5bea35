"""A programmatic long-task agent on truerun's runtime SDK (``truerun_runtime.longtask``).

The reference agent starts an attempt's process with TRUERUN_SERVER, TRUERUN_RUN_ID,
TRUERUN_ATTEMPT_ID and TRUERUN_CALLBACK_TOKEN in its environment; a long task's Start spec
can name this file as its command (``{"long_task": {...}, "argv": ["python3",
"examples/long_task_agent.py"]}``) instead of the declared-step driver.

The plan it knows: one step, ``notify``, that POSTs a message to the webhook at
EXAMPLE_WEBHOOK_URL. The order of calls is what keeps it honest:

1. ``step.intent(...)`` is recorded BEFORE the POST: if the process dies after it, truerun
   knows the message may have gone out and never lets a new attempt re-send it by itself;
2. the POST carries the step's idempotency key, so a receiver that deduplicates makes a
   repeat harmless;
3. ``step.receipt(...)`` records what the receiver answered (its id, its time): a person can
   check the effect, and recovery completes the step from it;
4. ``step.complete()``; when every step is settled, ``ready_for_verification`` and the
   verdicts of the runtime's read-only checkers: truerun, not the agent, says completed.

Run: ``python examples/long_task_agent.py`` (exit 0: the attempt did its part).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from truerun.v1 import long_task_service_pb2 as pb

from truerun_runtime.longtask import LongTaskAttempt, LongTaskError, check_criteria

WEBHOOK_ENV = "EXAMPLE_WEBHOOK_URL"


def post(url: str, message: dict[str, Any], idempotency_key: str) -> tuple[int, dict[str, Any]]:
    """One POST (JSON in, JSON out); the key lets the receiver drop a repeat."""
    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
        return int(response.status), json.loads(body) if body else {}


async def notify(attempt: LongTaskAttempt, record: pb.LongTaskStep, goal: str) -> None:
    url = os.environ[WEBHOOK_ENV]
    key = record.idempotency_key or f"{record.step_id}-{attempt.credential.run_id}"
    async with attempt.step(record.step_id) as step:
        # 1. the intent, before anything leaves this process
        await step.intent(url, f"POST a notification: {goal}", idempotency_key=key)
        # 2. the effect; an exception from here on leaves the step uncertain (the step
        #    context marks it so on the way out): recovery decides, this code never retries
        status, answer = await asyncio.to_thread(post, url, {"text": goal}, key)
        if status >= 300:
            raise RuntimeError(f"the webhook answered {status}")
        # 3. the receipt, as the receiver gave it
        at_ms = int(answer.get("at_ms") or time.time() * 1000)
        external_id = str(answer.get("id", ""))
        await step.receipt(url, at_ms, f"POST answered {status}", external_id, {"status": status})
        # 4. done: the receipt is the step's evidence
        await step.complete()


async def main() -> int:
    async with LongTaskAttempt.from_env() as attempt:
        try:
            while True:
                briefing = await attempt.briefing()
                if briefing.state != pb.LONG_TASK_STATE_RUNNING:
                    return 0  # waiting for a person, paused, or already verifying elsewhere
                if not briefing.current_step_id:
                    await attempt.ready_for_verification()
                    verdicts = await check_criteria(
                        briefing.criteria, cwd=Path.cwd(), env=os.environ
                    )
                    ack = await attempt.record_verification(verdicts)
                    print(f"verified: {pb.LongTaskState.Name(ack.state)}", file=sys.stderr)
                    return 0
                record = attempt.step_record(briefing.current_step_id)
                if record.step_id != "notify":
                    print(f"this agent does not know step {record.step_id}", file=sys.stderr)
                    return 1
                await notify(attempt, record, briefing.goal)
        except LongTaskError as error:  # carries the server's reason, e.g. LONG_TASK_LEASE_NOT_HELD
            print(f"truerun refused: {error} [{error.reason}]", file=sys.stderr)
            return 3


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
