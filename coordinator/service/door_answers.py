"""Answers the door gives from what it read instead of writing: a create whose idempotency key
already names a run (docs/state-model.md "6a. Idempotency keys and request ids"), and a grant
the approver's ``run_approvals`` row already holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain import commands as c
from coordinator.domain.decide import Decision, Outcome
from coordinator.domain.fingerprints import same_request
from coordinator.service.door_tx import Result
from coordinator.store.base import Loaded
from kernel.errors import AlreadyApproved, IdempotencyKeyConflict, IdempotencyKeyReused

__all__ = ["KeyLookup", "already_approved", "keyed_answer"]


@dataclass(frozen=True, slots=True)
class KeyLookup:
    """What a read of a create's idempotency key found (None: no run holds it yet)."""

    found: Loaded | None


def keyed_answer(existing: Loaded, use_existing: bool, asked: c.RunSpec | None = None) -> Result:
    """The answer to a create whose key already names ``existing``. With ``asked`` (a caller's
    create), a request other than the one that made the run is refused: the key is not this
    request's, so its run is not this request's answer. Creates inside the door's
    transactions pass none: their keys are truerun's own (kernel/derived_keys.py, which no
    caller may write), and a fire or an attempt found under its key is the one it made,
    whatever changed since (a schedule's template, a backfill over a fire time the calendar
    already ran)."""
    run = existing.run
    if not use_existing:
        raise IdempotencyKeyConflict(
            f"run {run.id} already has this idempotency key", existing_run_id=run.id
        )
    if asked is not None and not same_request(run, asked):
        raise IdempotencyKeyReused(
            f"idempotency key {asked.idempotency_key!r} was used for run {run.id} with a "
            "different request; send that request again or use a new key",
            run_id=run.id,
        )
    return Result(Outcome.APPLIED.value, run, existing.attempt, existing=True)


def already_approved(decision: Decision) -> AlreadyApproved:
    """The refusal when the approver's ``run_approvals`` row is there though the run as read
    did not hold the grant: the row's primary key makes a grant count once."""
    approver = decision.grant.approver if decision.grant is not None else ""
    return AlreadyApproved(
        f"{approver} already approved run {decision.run.id}",
        run_id=decision.run.id,
        approver=approver,
    )
