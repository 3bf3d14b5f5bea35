"""What an attempt needs to work, built from stored state only (seed C "简报"): never from a
previous process's memory, so a new attempt after a crash starts from exactly what was
recorded. Also the server's own verdicts that join an attempt's at verification."""

from __future__ import annotations

from truerun.v1 import long_task_service_pb2 as pb

from coordinator.api.convert import timestamp
from longtasks.api.convert import (
    criterion_to_proto,
    decision_to_proto,
    step_to_proto,
    task_state,
)
from longtasks.domain.checks import server_verdicts
from longtasks.domain.completion import Source
from longtasks.domain.model import Attempt, Task
from longtasks.domain.states import DecisionState
from longtasks.service.inputs import NewEvidence, VerdictIn
from longtasks.service.judge import Judge, subjective
from longtasks.service.reads import TaskView
from longtasks.store.rows import display_json


def lease_expiry(task: Task, attempt: Attempt) -> int | None:
    """When ``attempt``'s lease expires (None: it holds none)."""
    lease = task.lease
    if lease is None or lease.attempt_id != attempt.id:
        return None
    return lease.expires_at_ms


def briefing(view: TaskView, attempt: Attempt) -> pb.Briefing:
    task = view.task
    expires = lease_expiry(task, attempt)
    answered = [d for d in view.decisions if d.state is DecisionState.ANSWERED]
    return pb.Briefing(
        long_task_id=task.id,
        attempt_id=attempt.id,
        attempt_no=attempt.attempt_no,
        plan_version=task.plan_version,
        state=task_state(task),
        goal=task.goal,
        constraints=view.constraints,
        criteria=[criterion_to_proto(c, view) for c in view.criteria],
        steps=[step_to_proto(s, view) for s in view.steps],
        current_step_id=view.current_step_id() or "",
        previous_failure=view.previous_failure(attempt),
        lease_expire_time=timestamp(expires) if expires is not None else None,
        decisions=[decision_to_proto(d) for d in answered],
    )


def server_side(view: TaskView) -> list[VerdictIn]:
    """The server checkers' verdicts (receipt_present, step_completed) over the stored
    record, each with its evidence bound to its own criterion."""
    params = {}
    for record in view.criteria:
        spec = display_json(record.checker_spec)
        params[record.criterion.id] = spec if isinstance(spec, dict) else None
    found = server_verdicts(
        view.criteria, params, view.steps, list(view.effects), list(view.evidence)
    )
    return [
        VerdictIn(
            v.criterion_id,
            Source.CHECKER,
            v.result,
            tuple(
                NewEvidence(e.kind, e.reference, e.summary, effect_id=e.effect_id)
                for e in v.evidence
            ),
        )
        for v in found
    ]


async def judged(view: TaskView, judge: Judge | None) -> list[VerdictIn]:
    """A configured judge's opinions on the subjective criteria (none without a judge: they
    stay unproven and a person is asked)."""
    if judge is None:
        return []
    out: list[VerdictIn] = []
    for record in subjective(view.criteria):
        opinion = await judge.judge(view.task.goal, record, list(view.evidence))
        if opinion is None:
            continue
        proof = NewEvidence("judge", opinion.reference, opinion.reasoning[:2048])
        out.append(VerdictIn(record.criterion.id, Source.JUDGE, opinion.result, (proof,)))
    return out
