"""The approval decider (coordinator/domain/decide/approval.py), pure: what each grant writes,
what the policy refuses, what a retry carries, the stored form, and `truerun show`'s lines
(docs/state-model.md "Approvals")."""

from __future__ import annotations

import argparse

import pytest
from google.protobuf import duration_pb2
from truerun.v1 import common_pb2

from coordinator.domain import approvals
from coordinator.domain import commands as c
from coordinator.domain.approvals import Approval, ApprovalPolicy, Grant
from coordinator.domain.decide import Context, Decision, RunWrite, decide
from coordinator.domain.model import Actor, Run
from coordinator.domain.states import ActorType, RunStatus
from kernel.errors import (
    AlreadyApproved,
    ApprovalExpired,
    ApproverNotEligible,
    InvalidTransition,
    SelfApprovalRefused,
)
from kernel.records import replace
from services.cli.client import approval_lines
from services.cli.run_commands import _approval

NOW = 1_800_000_000_000
CAROL = Actor(ActorType.USER, "carol")


def person(name: str) -> Actor:
    return Actor(ActorType.USER, name)


def context(now: int = NOW) -> Context:
    ids = iter(f"id-{i}" for i in range(100))
    return Context(now_ms=now, new_id=lambda: next(ids), new_token=lambda: "token")


def created(policy: ApprovalPolicy, by: Actor = CAROL) -> Run:
    spec = c.RunSpec("p", "o", "t", by, requires_approval=True, approval_policy=policy)
    return decide(c.CreateRun(spec), None, None, context()).run


def approve(
    run: Run, name: str, groups: frozenset[str] | set[str] = frozenset(), now: int = NOW
) -> Decision:
    command = c.Approve(run.id, person(name), approver_groups=frozenset(groups))
    return decide(command, run, None, context(now))


def test_a_create_keeps_the_policy_and_when_it_closes() -> None:
    run = created(ApprovalPolicy(2, ("ops",), True, 60_000))
    assert run.status is RunStatus.PENDING_APPROVAL
    assert run.approval == Approval(ApprovalPolicy(2, ("ops",), True, 60_000), NOW + 60_000, ())
    plain = created(approvals.DEFAULT_POLICY)
    assert plain.approval == Approval(approvals.DEFAULT_POLICY, None, ())
    queued = decide(c.CreateRun(c.RunSpec("p", "o", "t", CAROL)), None, None, context()).run
    assert queued.approval is None


def test_each_grant_is_one_update_and_the_last_one_needed_queues_the_run() -> None:
    run = created(ApprovalPolicy(2, ("ops", "sre"), False, 0))
    first = approve(run, "alice", {"ops", "dev"})
    assert first.run_write is RunWrite.UPDATE and first.expected_version == run.version
    assert first.run.status is RunStatus.PENDING_APPROVAL and first.attempt is None
    assert first.run.version == run.version + 1
    assert first.run.approval is not None
    assert first.run.approval.grants == (Grant("alice", ("ops",), NOW),)
    assert [(e.type, e.payload) for e in first.events] == [
        (
            "run.approval_granted",
            {"approvals": 1, "required_approvals": 2, "approver_groups": "ops"},
        )
    ]

    second = approve(first.run, "bob", {"sre", "ops"}, now=NOW + 5)
    assert second.run.status is RunStatus.QUEUED and second.attempt is not None
    assert second.run.approval is not None and second.run.approval.remaining == 0
    assert [g.approver for g in second.run.approval.grants] == ["alice", "bob"]
    assert second.run.approval.grants[1] == Grant("bob", ("ops", "sre"), NOW + 5)
    assert [e.type for e in second.events] == ["run.approved", "run.queued"]
    assert second.events[0].payload == {
        "from_status": "pending_approval",
        "approvals": 2,
        "required_approvals": 2,
        "approver_groups": "ops,sre",
    }


def test_what_the_policy_refuses() -> None:
    run = created(ApprovalPolicy(2, ("ops",), True, 60_000))
    with pytest.raises(ApproverNotEligible):
        approve(run, "dave", {"dev"})
    with pytest.raises(ApproverNotEligible):
        approve(run, "dave")
    with pytest.raises(SelfApprovalRefused):
        approve(run, "carol", {"ops"})
    with pytest.raises(ApprovalExpired):
        approve(run, "alice", {"ops"}, now=NOW + 60_000)
    granted = approve(run, "alice", {"ops"}, now=NOW + 59_999).run
    with pytest.raises(AlreadyApproved):
        approve(granted, "alice", {"ops"})
    # Without groups anyone may approve; without refuse_self the creator too.
    anyone = created(ApprovalPolicy(1, (), False, 0))
    assert approve(anyone, "carol").run.status is RunStatus.QUEUED
    # Once queued, approving is no transition, whoever sends it.
    queued = approve(anyone, "carol").run
    with pytest.raises(InvalidTransition):
        approve(queued, "carol")


def test_a_run_pending_approval_without_a_kept_approval_needs_one_approver() -> None:
    run = replace(created(approvals.DEFAULT_POLICY), approval=None)
    decision = approve(run, "alice")
    assert decision.run.status is RunStatus.QUEUED
    assert decision.run.approval == Approval(
        approvals.DEFAULT_POLICY, None, (Grant("alice", (), NOW),)
    )


def test_a_retry_asks_for_the_same_approval_and_carries_no_grant() -> None:
    policy = ApprovalPolicy(2, ("ops",), True, 60_000)
    run = approve(approve(created(policy), "alice", {"ops"}).run, "bob", {"ops"}).run
    ended = replace(run, status=RunStatus.CANCELLED)
    later = NOW + 3_600_000
    retry = decide(c.ManualRetry(ended.id, person("alice")), ended, None, context(later)).run
    assert retry.status is RunStatus.PENDING_APPROVAL
    assert retry.retry_of_run_id == run.id and retry.created_by == "alice"
    assert retry.approval == Approval(policy, later + 60_000, ())
    # a run that required none is retried straight into the queue, as before
    plain = decide(c.CreateRun(c.RunSpec("p", "o", "t", CAROL)), None, None, context()).run
    ended_plain = replace(plain, status=RunStatus.FAILED)
    again = decide(c.ManualRetry(plain.id, CAROL), ended_plain, None, context()).run
    assert again.status is RunStatus.QUEUED and again.approval is None


def test_the_stored_form_round_trips() -> None:
    approval = Approval(
        ApprovalPolicy(3, ("ops", "qa"), True, 90_000),
        NOW + 90_000,
        (Grant("alice", ("ops",), NOW), Grant("bob", (), NOW + 1)),
    )
    text = approvals.encode(approval)
    assert text is not None and " " not in text
    assert approvals.decode(text) == approval
    assert approvals.encode(None) is None and approvals.decode(None) is None


def test_truerun_show_says_what_is_required_and_who_approved() -> None:
    approval = common_pb2.RunApproval(
        policy=common_pb2.ApprovalPolicy(
            required_approvals=2,
            approver_groups=["ops"],
            refuse_self_approval=True,
            expire_after=duration_pb2.Duration(seconds=3600),
        ),
        grants=[common_pb2.ApprovalGrant(approver="alice", groups=["ops"])],
        remaining=1,
    )
    approval.expire_time.FromMilliseconds(NOW)
    approval.grants[0].grant_time.FromMilliseconds(NOW - 1000)
    lines = approval_lines(approval)
    assert lines[0].startswith("approval   2 approvers of ops, not its creator, closes ")
    assert lines[0].endswith("(1 more needed)")
    assert lines[1].startswith("granted by alice (ops) at ")
    assert approval_lines(common_pb2.RunApproval(remaining=0)) == [
        "approval   1 approver   (approved)"
    ]


def test_truerun_submit_flags_make_the_policy() -> None:
    def args(**given: object) -> argparse.Namespace:
        values: dict[str, object] = {
            "approvals": 0,
            "approver_group": [],
            "refuse_self_approval": False,
            "approval_expires": "",
        }
        values.update(given)
        return argparse.Namespace(**values)

    assert _approval(args()) is None
    asked = _approval(args(approvals=2, approver_group=["ops", "sre"], approval_expires="1h"))
    assert asked == common_pb2.ApprovalPolicy(
        required_approvals=2,
        approver_groups=["ops", "sre"],
        expire_after=duration_pb2.Duration(seconds=3600),
    )
