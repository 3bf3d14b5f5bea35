"""Approving a run: one approver's grant, and once enough distinct approvers have granted,
the run's first attempt queued (docs/state-model.md "Approvals").

Each grant is one decision: the run's approval with the grant added (version + 1) and one
event, ``run.approval_granted`` while more approvers are needed, ``run.approved`` (then
``run.queued``) for the last one needed. The door writes the grant's ``run_approvals`` row in
the same transaction (coordinator/service/transitions.py); two approvers racing both read
the same version, so the second one's compare-and-set misses, and decided again on the
first one's grant it is the one that queues the run: one grant each, one transition.
"""

from __future__ import annotations

from typing import Any

from coordinator.domain import approvals
from coordinator.domain import commands as c
from coordinator.domain.decide.decision import Context, Decision
from coordinator.domain.decide.helpers import _enqueue_new_attempt, _event, _require, _run_update
from coordinator.domain.decide.preconditions import can_approve
from coordinator.domain.model import Attempt, Run
from kernel.errors import (
    AlreadyApproved,
    ApprovalExpired,
    ApproverNotEligible,
    InvalidArgument,
    SelfApprovalRefused,
)
from kernel.records import replace


def _approve(cmd: c.Approve, run: Run, attempt: Attempt | None, ctx: Context) -> Decision:
    approver = cmd.actor.id
    if not approver:
        raise InvalidArgument("an approval needs an approver")
    _require(can_approve(run, attempt), "approve", run, attempt)
    # A run pending approval from before runs kept their approval needs one approver.
    approval = run.approval or approvals.LEGACY
    if approval.grant_of(approver) is not None:
        raise AlreadyApproved(
            f"{approver} already approved run {run.id}; a grant counts once",
            run_id=run.id,
            approver=approver,
        )
    policy = approval.policy
    if approval.expires_at_ms is not None and ctx.now_ms >= approval.expires_at_ms:
        raise ApprovalExpired(
            f"the approval of run {run.id} closed at {approval.expires_at_ms} ms; "
            "cancel it, or retry it once it ended to ask again",
            run_id=run.id,
            expires_at_ms=str(approval.expires_at_ms),
        )
    if policy.refuse_self and approver == run.created_by:
        raise SelfApprovalRefused(
            f"{approver} created run {run.id}; its policy needs another approver",
            run_id=run.id,
            approver=approver,
        )
    counted = tuple(sorted(cmd.approver_groups.intersection(policy.groups)))
    if policy.groups and not counted:
        raise ApproverNotEligible(
            f"{approver} is in none of the approver groups of run {run.id} "
            f"({', '.join(policy.groups)})",
            run_id=run.id,
            approver=approver,
            groups=",".join(policy.groups),
        )
    grant = approvals.Grant(approver, counted, ctx.now_ms)
    granted = replace(approval, grants=(*approval.grants, grant))
    payload: dict[str, Any] = {
        "approvals": len(granted.grants),
        "required_approvals": policy.required,
        "approver_groups": ",".join(counted) or None,
    }
    if granted.remaining > 0:
        events = [_event("run.approval_granted", cmd.actor, **payload)]
        return replace(_run_update(run, ctx, events, approval=granted), grant=grant)
    events = [_event("run.approved", cmd.actor, from_status=run.status.value, **payload)]
    queued = _enqueue_new_attempt(replace(run, approval=granted), None, ctx, cmd.actor, events)
    return replace(queued, grant=grant)
