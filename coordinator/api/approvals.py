"""A run's approval over the API: the policy a CreateRun asks for (validated), and the
``RunApproval`` every run read carries (docs/state-model.md "Approvals")."""

from __future__ import annotations

from google.protobuf import duration_pb2, timestamp_pb2
from truerun.v1 import common_pb2, run_service_pb2

from coordinator.api import validation
from coordinator.domain.approvals import (
    DEFAULT_POLICY,
    MAX_APPROVER_GROUPS,
    MAX_EXPIRE_AFTER_MS,
    MAX_REQUIRED_APPROVERS,
    Approval,
    ApprovalPolicy,
)
from kernel.errors import InvalidArgument


def requested(request: run_service_pb2.CreateRunRequest) -> tuple[bool, ApprovalPolicy]:
    """Whether the run requires approval, and its policy: ``approval`` implies it; plain
    ``requires_approval`` is one approver, anyone, no expiry."""
    if not request.HasField("approval"):
        return request.requires_approval, DEFAULT_POLICY
    asked = request.approval
    required = validation.in_range(
        asked.required_approvals or 1, "approval.required_approvals", 1, MAX_REQUIRED_APPROVERS
    )
    if len(asked.approver_groups) > MAX_APPROVER_GROUPS:
        raise InvalidArgument(f"at most {MAX_APPROVER_GROUPS} approval.approver_groups")
    groups = {validation.name(g, "approval.approver_groups[]") or "" for g in asked.approver_groups}
    expire = asked.expire_after
    if expire.seconds < 0 or expire.nanos < 0 or expire.nanos % 1_000_000:
        raise InvalidArgument("approval.expire_after must be whole, non-negative milliseconds")
    expire_ms = validation.in_range(
        expire.ToMilliseconds(), "approval.expire_after (ms)", 0, MAX_EXPIRE_AFTER_MS
    )
    policy = ApprovalPolicy(required, tuple(sorted(groups)), asked.refuse_self_approval, expire_ms)
    return True, policy


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def approval_to_proto(approval: Approval) -> common_pb2.RunApproval:
    p = approval.policy
    policy = common_pb2.ApprovalPolicy(
        required_approvals=p.required,
        approver_groups=list(p.groups),
        refuse_self_approval=p.refuse_self,
    )
    if p.expire_after_ms:
        expire_after = duration_pb2.Duration()
        expire_after.FromMilliseconds(p.expire_after_ms)
        policy.expire_after.CopyFrom(expire_after)
    message = common_pb2.RunApproval(
        policy=policy,
        grants=[
            common_pb2.ApprovalGrant(
                approver=g.approver, groups=list(g.groups), grant_time=_timestamp(g.granted_at_ms)
            )
            for g in approval.grants
        ],
        remaining=approval.remaining,
    )
    if approval.expires_at_ms is not None:
        message.expire_time.CopyFrom(_timestamp(approval.expires_at_ms))
    return message
