"""`truerun submit | show | cancel | retry | approve`: one run at a time. Each prints a line
for people, or with ``-o json|yaml`` the run as the API returned it (``{"run": ...}`` plus
what the call said: ``existing`` for submit, ``outcome`` for cancel), so scripts can chain
(``truerun submit job -o json | jq -r .run.id``)."""

from __future__ import annotations

import argparse
import os
import time

from google.protobuf import struct_pb2
from truerun.v1 import common_pb2, run_service_pb2

from services.cli.client import Client, run_line, show_run
from services.cli.output import emit
from services.cli.run_times import attempt_lines, run_time_lines
from services.cli.schedule import parse_duration


def _me() -> common_pb2.Actor:
    return common_pb2.Actor(type=common_pb2.ACTOR_TYPE_USER, id=os.environ.get("USER", "me"))


def _approval(args: argparse.Namespace) -> common_pb2.ApprovalPolicy | None:
    """The policy the approval flags ask for; None when none was given."""
    given = (args.approvals, args.approver_group, args.refuse_self_approval, args.approval_expires)
    if not any(given):
        return None
    policy = common_pb2.ApprovalPolicy(
        required_approvals=args.approvals,
        approver_groups=args.approver_group,
        refuse_self_approval=args.refuse_self_approval,
    )
    if args.approval_expires:
        policy.expire_after.CopyFrom(parse_duration("--approval-expires", args.approval_expires))
    return policy


def submit(client: Client, args: argparse.Namespace) -> int:
    spec = struct_pb2.Struct()
    if args.run_command:
        spec.update({"command": args.run_command})
    response = client.stub.CreateRun(
        run_service_pb2.CreateRunRequest(
            project_id=args.project,
            owner_id=args.owner,
            task_id=args.task_id,
            agent_id=args.agent,
            priority=args.priority,
            max_attempts=args.max_attempts,
            idempotency_key=args.idempotency_key,
            requires_approval=args.requires_approval,
            spec=spec,
            actor=common_pb2.Actor(type=common_pb2.ACTOR_TYPE_USER, id=args.owner),
            approval=_approval(args),
        ),
        timeout=client.timeout,
    )
    note = "  (existing run for this idempotency key)" if response.existing else ""
    shown = {"run": response.run, "existing": response.existing}
    emit(args.output, shown, run_line(response.run) + note)
    return 0


def show(client: Client, args: argparse.Namespace) -> int:
    run = client.stub.GetRun(run_service_pb2.GetRunRequest(id=args.run_id), timeout=client.timeout)
    attempts = client.stub.ListAttempts(
        run_service_pb2.ListAttemptsRequest(run_id=run.id), timeout=client.timeout
    ).attempts
    events = client.events(args.run_id)
    if args.output == "text":
        now = time.time()
        print(show_run(run, events, [*run_time_lines(run, now), *attempt_lines(attempts, now)]))
    else:
        emit(args.output, {"run": run, "attempts": list(attempts), "events": events}, "")
    return 0


def cancel(client: Client, args: argparse.Namespace) -> int:
    response = client.stub.CancelRun(
        run_service_pb2.CancelRunRequest(id=args.run_id, actor=_me()), timeout=client.timeout
    )
    outcome = run_service_pb2.CancelOutcome.Name(response.outcome)
    said = outcome.removeprefix("CANCEL_OUTCOME_").lower()
    shown = {"run": response.run, "outcome": outcome}
    emit(args.output, shown, f"{run_line(response.run)}  [{said}]")
    return 0


def retry(client: Client, args: argparse.Namespace) -> int:
    run = client.stub.RetryRun(
        run_service_pb2.RetryRunRequest(id=args.run_id, actor=_me()), timeout=client.timeout
    )
    emit(args.output, {"run": run}, f"{run_line(run)}  (retry of {run.retry_of_run_id})")
    return 0


def approve(client: Client, args: argparse.Namespace) -> int:
    run = client.stub.ApproveRun(
        run_service_pb2.ApproveRunRequest(id=args.run_id, actor=_me()), timeout=client.timeout
    )
    emit(args.output, {"run": run}, run_line(run))
    return 0
