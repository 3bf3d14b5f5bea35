"""The evidence suites' shared moves: an attempt's run printing output through the runtime
protocol (as a real command's stdout reaches the output store), a step completed with
evidence references, a read through ReadEvidence, and the next attempt after one ended."""

from __future__ import annotations

from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import runtime_service_pb2 as pb

from tests.support.longtask_api import OWNER, PROJECT, get, step_of
from tests.support.longtask_stack import LiveAttempt, LongTaskStack, start_attempt

LINE = "line {n:05d} of the build log, nothing secret in it\n"
CHUNK = 3000  # characters per OUTPUT event (the runtime protocol's bound)


async def print_output(live: LiveAttempt, lines: int) -> tuple[str, int]:
    """The attempt's run accepted, running, and printing ``lines`` lines: the text, and the
    next free event sequence number."""
    start = live.start
    await live.runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
    await live.runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
    text = "".join(LINE.format(n=n) for n in range(lines))
    seq, offset = 3, 0
    for at in range(0, len(text), CHUNK):
        chunk = text[at : at + CHUNK]
        payload = {"stream": "output", "data": chunk, "offset": offset}
        await live.runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload=payload)
        offset += len(chunk.encode())
        seq += 1
    await live.runtime.acked(start.attempt_id, seq - 1, timeout=120)
    return text, seq


async def end_run(live: LiveAttempt, seq: int, exit_code: int = 0) -> None:
    kind = pb.RUNTIME_EVENT_TYPE_SUCCEEDED if exit_code == 0 else pb.RUNTIME_EVENT_TYPE_FAILED
    await live.runtime.event(live.start, seq, kind, exit_code=exit_code)
    await live.runtime.acked(live.start.attempt_id, seq, timeout=60)


def output_ref(live: LiveAttempt, summary: str = "the build log") -> lt.EvidenceRef:
    return lt.EvidenceRef(
        kind="run_output",
        reference=f"run:{live.start.run_id}/{live.start.attempt_id}",
        summary=summary,
    )


async def complete(
    stack: LongTaskStack,
    live: LiveAttempt,
    step_id: str,
    evidence: list[lt.EvidenceRef],
    task_id: str = "lt-1",
    project: str = PROJECT,
) -> lt.StepAck:
    task = await stack.tasks.GetLongTask(
        lt.GetLongTaskRequest(project_id=project, long_task_id=task_id)
    )
    version = step_of(task, step_id).version
    begun = await stack.attempts.BeginStep(
        lt.BeginStepRequest(credential=live.credential, step_id=step_id, step_version=version)
    )
    return await stack.attempts.CompleteStep(
        lt.CompleteStepRequest(
            credential=live.credential,
            step_id=step_id,
            step_version=begun.step.version,
            evidence=evidence,
        )
    )


async def read(
    stack: LongTaskStack, live: LiveAttempt, evidence_id: str, offset: int = 0, max_bytes: int = 0
) -> lt.EvidenceContent:
    return await stack.attempts.ReadEvidence(
        lt.ReadEvidenceRequest(
            credential=live.credential,
            evidence_id=evidence_id,
            offset=offset,
            max_bytes=max_bytes,
        )
    )


async def next_attempt(stack: LongTaskStack, ended: LiveAttempt, why: str) -> LiveAttempt:
    """``ended``'s run is over: its attempt ends (as the watcher ends it), a person clears
    a recovery if one is asked, and the scheduler starts the next attempt."""
    await stack.door.attempt_ended("lt-1", ended.attempt_id, why)
    task = await get(stack)
    if task.state == lt.LONG_TASK_STATE_RECOVERY_REQUIRED:
        await stack.tasks.ClearRecovery(
            lt.ClearRecoveryRequest(project_id=PROJECT, long_task_id="lt-1", etag=task.etag)
        )
    return await start_attempt(stack, "lt-1", OWNER)
