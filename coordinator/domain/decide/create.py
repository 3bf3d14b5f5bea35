"""Run creation: a new run, created or retried by hand from an ended one (a retry of a run
that required approval requires the same approval again). Approving it is ``approval``."""

from __future__ import annotations

from coordinator.domain import approvals
from coordinator.domain import commands as c
from coordinator.domain.decide.decision import AttemptWrite, Context, Decision, Outcome, RunWrite
from coordinator.domain.decide.helpers import _event, _new_attempt, _require
from coordinator.domain.decide.preconditions import can_retry
from coordinator.domain.fingerprints import request_fingerprint
from coordinator.domain.model import Attempt, Run
from coordinator.domain.states import RunStatus
from kernel.records import replace


def _create(spec: c.RunSpec, ctx: Context, retry_of: Run | None) -> Decision:
    run_id = ctx.new_id()
    status = RunStatus.PENDING_APPROVAL if spec.requires_approval else RunStatus.QUEUED
    run = Run(
        id=run_id,
        project_id=spec.project_id,
        owner_id=spec.owner_id,
        task_id=spec.task_id,
        task_revision=spec.task_revision,
        agent_id=spec.agent_id,
        execution_scope=spec.execution_scope,
        scope_policy=spec.scope_policy,
        trigger_type=spec.trigger_type,
        trigger_id=spec.trigger_id,
        idempotency_key=spec.idempotency_key,
        retry_of_run_id=retry_of.id if retry_of else None,
        priority=spec.priority,
        max_attempts=spec.max_attempts,
        idempotent=spec.idempotent,
        run_now=spec.run_now,
        pinned_runtime_instance_id=spec.pinned_runtime_instance_id,
        required_labels=spec.required_labels,
        spec=spec.spec,
        status=status,
        version=1,
        event_sequence=0,
        current_attempt_id=None,
        attempt_count=0,
        created_by=spec.created_by.id,
        created_at_ms=ctx.now_ms,
        updated_at_ms=ctx.now_ms,
        # Only a keyed run is ever compared with a later create (fingerprints.py), so a
        # create without a key (the hot path's) pays nothing for it.
        request_fingerprint=request_fingerprint(spec) if spec.idempotency_key else None,
        approval=approvals.opened(spec.approval_policy, ctx.now_ms)
        if spec.requires_approval
        else None,
    )
    actor = spec.created_by
    events = [
        _event(
            "run.created",
            actor,
            to_status=status.value,
            retry_of_run_id=run.retry_of_run_id,
            trace_parent=spec.trace_parent or None,
        )
    ]
    attempt = None
    if status is RunStatus.QUEUED:
        attempt = _new_attempt(run, ctx, None)
        run = replace(run, current_attempt_id=attempt.id, attempt_count=1, queued_at_ms=ctx.now_ms)
        events.append(
            _event(
                "run.queued",
                actor,
                attempt.id,
                attempt_no=1,
                runtime_task_id=attempt.runtime_task_id,
            )
        )
    return Decision(
        outcome=Outcome.APPLIED,
        run=run,
        run_write=RunWrite.INSERT,
        attempt=attempt,
        attempt_write=AttemptWrite.INSERT if attempt else None,
        events=tuple(events),
    )


def _manual_retry(cmd: c.ManualRetry, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    _require(
        can_retry(run, attempt),
        "retry by hand (only failed, cancelled or timed out runs)",
        run,
        attempt,
    )
    spec = c.RunSpec(
        project_id=run.project_id,
        owner_id=run.owner_id,
        task_id=run.task_id,
        created_by=cmd.actor,
        task_revision=run.task_revision,
        agent_id=run.agent_id,
        execution_scope=run.execution_scope,
        scope_policy=run.scope_policy,
        trigger_type="manual_retry",
        trigger_id=run.id,
        priority=run.priority,
        max_attempts=run.max_attempts,
        idempotent=run.idempotent,
        # A retry asks again: the approval the run required, not the grants it got.
        requires_approval=run.approval is not None,
        approval_policy=run.approval.policy if run.approval else approvals.DEFAULT_POLICY,
        pinned_runtime_instance_id=run.pinned_runtime_instance_id,
        required_labels=run.required_labels,
        spec=run.spec,
    )
    return _create(spec, ctx, retry_of=run)
