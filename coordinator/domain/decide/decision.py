"""What a decision is: the rows to write and the events to append, and how several
decisions on one run fold into one write (``chain``).

The store writes a ``Decision`` in one transaction with compare-and-set on the run version
and the attempt status + sequence; nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from coordinator.domain import output
from coordinator.domain.approvals import Grant
from coordinator.domain.model import Attempt, NewEvent, Run
from coordinator.domain.states import AttemptStatus
from kernel.records import fast, replace


class Outcome(StrEnum):
    APPLIED = "applied"
    ALREADY_REQUESTED = "already_requested"
    ALREADY_TERMINAL = "already_terminal"
    IGNORED = "ignored"  # a late, duplicate or out-of-order runtime event, recorded only


class RunWrite(StrEnum):
    INSERT = "insert"
    UPDATE = "update"  # compare-and-set on ``expected_version``
    EVENTS_ONLY = "events_only"  # the run row is unchanged apart from its event sequence
    NONE = "none"


class AttemptWrite(StrEnum):
    INSERT = "insert"
    UPDATE = "update"  # compare-and-set on the expected status and event sequence


@fast
@dataclass(frozen=True, slots=True)
class Context:
    now_ms: int
    new_id: Callable[[], str]
    new_token: Callable[[], str]
    output: output.OutputPolicy = output.DEFAULT_OUTPUT_POLICY


@fast
@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    run: Run
    run_write: RunWrite
    expected_version: int | None = None
    attempt: Attempt | None = None
    attempt_write: AttemptWrite | None = None
    attempt_expected_status: AttemptStatus | None = None
    attempt_expected_seq: int | None = None
    events: tuple[NewEvent, ...] = ()
    #: The attempt update changes the lease (claim, release, finish); otherwise the store
    #: keeps the lease a concurrent heartbeat renewal may have extended.
    lease_written: bool = False
    #: Output to append to the attempt's output store, in the same transaction.
    output: tuple[output.Stored, ...] = ()
    #: An approver's grant the run's approval gained: its ``run_approvals`` row is written
    #: in the same transaction, so a grant counts once however approvals race.
    grant: Grant | None = None


def chain(decisions: list[Decision]) -> Decision:
    """Fold consecutive decisions on one run into one write: the last state, every event,
    compare-and-set against the state before the first. ``decisions`` were decided one after
    another, each on the state the previous one left (runtime events of one attempt)."""
    first, last = decisions[0], decisions[-1]
    updates = [d for d in decisions if d.run_write is RunWrite.UPDATE]
    attempt_updates = [d for d in decisions if d.attempt_write is AttemptWrite.UPDATE]
    events = tuple(e for d in decisions for e in d.events)
    pieces = tuple(piece for d in decisions for piece in d.output)
    if not updates:
        return replace(last, events=events, output=pieces)
    head = attempt_updates[0] if attempt_updates else None
    return Decision(
        outcome=updates[-1].outcome,
        run=updates[-1].run,
        run_write=RunWrite.UPDATE,
        expected_version=updates[0].expected_version,
        attempt=attempt_updates[-1].attempt if attempt_updates else first.attempt,
        attempt_write=AttemptWrite.UPDATE if attempt_updates else None,
        attempt_expected_status=head.attempt_expected_status if head else None,
        attempt_expected_seq=head.attempt_expected_seq if head else None,
        events=events,
        lease_written=any(d.lease_written for d in decisions),
        output=pieces,
        grant=_one_grant(decisions),
    )


def _one_grant(decisions: list[Decision]) -> Grant | None:
    grants = [d.grant for d in decisions if d.grant is not None]
    assert len(grants) <= 1, "one write records at most one approver's grant"
    return grants[0] if grants else None
