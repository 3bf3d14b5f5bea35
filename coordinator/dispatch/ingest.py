"""Runtime events in: bound to the attempt, its runtime task id, the sending runtime instance
and the callback token; decided by the domain; acknowledged by seq once processed (applied,
ignored as late, or refused). A refused event changes nothing.

A micro-batch (everything a stream buffered since the last flush) is applied together: one
read for all its attempts, each attempt's events decided one after another in memory and
folded into one write (domain.decide.chain), all writes in one transaction through the door
(``Transitions.apply_batch``). A refused or ignored event never fails the batch; if another
writer moved one of the runs meanwhile, the batch falls back to applying its events one by
one, each decided again on fresh state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from truerun.v1 import runtime_service_pb2 as pb

from coordinator.api.convert import struct_to_dict
from coordinator.dispatch.tokens import ANY_OWNER, callback_token_valid
from coordinator.domain import commands as c
from coordinator.domain.decide import Decision, RunWrite, chain, decide
from coordinator.domain.model import Actor, Attempt, Run
from coordinator.domain.states import ActorType
from coordinator.service.transitions import Result, Transitions
from coordinator.store.base import Loaded
from kernel import json_bounds
from kernel.errors import DomainError

log = logging.getLogger(__name__)

#: The runtime event types that end an attempt, and the outcome each says.
OUTCOMES = {
    pb.RUNTIME_EVENT_TYPE_SUCCEEDED: c.RuntimeOutcome.SUCCEEDED,
    pb.RUNTIME_EVENT_TYPE_FAILED: c.RuntimeOutcome.FAILED,
    pb.RUNTIME_EVENT_TYPE_CANCELLED: c.RuntimeOutcome.CANCELLED,
    pb.RUNTIME_EVENT_TYPE_TIMED_OUT: c.RuntimeOutcome.TIMED_OUT,
}
_NOTES = {
    pb.RUNTIME_EVENT_TYPE_OUTPUT: c.NoteKind.OUTPUT,
    pb.RUNTIME_EVENT_TYPE_SIGNALLED: c.NoteKind.SIGNALLED,
}
TERMINAL_TYPES = frozenset(OUTCOMES)
#: RUNNING with an idle turn is not proof of running; unspecified: the runtime did not say.
_TURNS = {pb.TURN_STATUS_ACTIVE: True, pb.TURN_STATUS_IDLE: False}


@dataclass(frozen=True, slots=True)
class Ingested:
    acks: dict[str, int]  # attempt id -> highest processed seq
    results: list[Result]
    #: events refused for authority (another runtime, owner or callback token): not acked
    refused: int = 0


def command_for(event: pb.RuntimeEvent, run_id: str, actor: Actor) -> c.RuntimeCommand | None:
    base = (run_id, event.attempt_id, event.runtime_task_id, event.seq, actor)
    kind = event.type
    if kind == pb.RUNTIME_EVENT_TYPE_ACCEPTED:
        return c.RuntimeAccepted(*base)
    if kind == pb.RUNTIME_EVENT_TYPE_RUNNING:
        return c.RuntimeRunning(*base, turn_active=_TURNS.get(event.turn_status))
    if kind in _NOTES:
        details = struct_to_dict(event.payload)
        violation = json_bounds.first_violation(details, json_bounds.current())
        if violation is not None:  # refused, nothing written (docs/runtime-protocol.md "Events")
            log.warning(
                "event %s/%s refused: %s",
                event.attempt_id,
                event.seq,
                violation.describe("its payload"),
            )
            return None
        if event.turn_status:
            details["turn_status"] = pb.TurnStatus.Name(event.turn_status)
        return c.RuntimeNote(*base, kind=_NOTES[kind], details=details)
    if kind in OUTCOMES:
        return c.RuntimeResult(
            *base,
            outcome=OUTCOMES[kind],
            exit_code=event.exit_code if event.HasField("exit_code") else None,
            error_code=event.error_code or None,
            error_summary=event.error_summary or None,
        )
    return None


class EventIngest:
    def __init__(
        self, transitions: Transitions, on_timed: Callable[[float], None] | None = None
    ) -> None:
        """``on_timed(seconds)``: each batch's time to apply (a latency histogram)."""
        self._transitions = transitions
        self._on_timed = on_timed

    async def ingest(
        self, instance_id: str, events: Sequence[pb.RuntimeEvent], owner_id: str
    ) -> Ingested:
        """``owner_id``: whom the sender's runtime token acts for (ANY_OWNER: anyone)."""
        began = time.perf_counter()
        try:
            return await self._ingest(instance_id, events, owner_id)
        finally:
            if self._on_timed is not None:
                self._on_timed(time.perf_counter() - began)

    async def _ingest(
        self, instance_id: str, events: Sequence[pb.RuntimeEvent], owner_id: str
    ) -> Ingested:
        acks: dict[str, int] = {}
        by_attempt: dict[str, list[pb.RuntimeEvent]] = {}
        for event in events:
            by_attempt.setdefault(event.attempt_id, []).append(event)
        actor = Actor(ActorType.RUNTIME, instance_id)
        loaded = await self._transitions.reader.load_attempts(list(by_attempt))
        decisions: list[Decision] = []
        statuses: list[str] = []
        refused = 0
        authorized: dict[str, list[pb.RuntimeEvent]] = {}
        now = self._transitions.context().now_ms
        for attempt_id, sent in by_attempt.items():
            item = loaded.get(attempt_id)
            if item is None or not _sent_by_its_runtime(item, instance_id, owner_id):
                log.warning("events for attempt %s from %s refused", attempt_id, instance_id)
                refused += len(sent)
                continue
            assert item.attempt is not None
            # An event refused for authority (its callback token) is never acknowledged: the
            # runtime keeps it and sends it again, it is not dropped as if processed.
            batch = [event for event in sent if _authorized(event, item.attempt, now)]
            refused += len(sent) - len(batch)
            if not batch:
                continue
            authorized[attempt_id] = batch
            # a re-sent or otherwise ignored event is acknowledged with the attempt's highest
            # processed seq (docs/runtime-protocol.md), so nothing before it is sent again
            acks[attempt_id] = max(max(e.seq for e in batch), item.attempt.last_event_seq)
            if (decision := self._fold(item, batch, actor)) is not None:
                decisions.append(decision)
                statuses.append(item.run.status.value)
        results = await self._transitions.apply_batch(decisions, statuses)
        if results is None:  # a run moved since it was read: decide again, event by event
            results = await self._one_by_one(loaded, authorized, actor)
        return Ingested(acks, results, refused)

    def _fold(self, item: Loaded, events: list[pb.RuntimeEvent], actor: Actor) -> Decision | None:
        """Decide each event on the state the previous one left; one write for all."""
        run: Run = item.run
        attempt: Attempt | None = item.attempt
        assert attempt is not None
        ctx = self._transitions.context()
        chained: list[Decision] = []
        for event in events:
            if not _token_ok(event, attempt, ctx.now_ms):
                log.warning("event %s/%s refused: callback token", attempt.id, event.seq)
                continue
            command = command_for(event, run.id, actor)
            if command is None:
                continue
            try:
                decision = decide(command, run, attempt, ctx)
            except DomainError as error:
                log.info("event %s/%s refused: %s", attempt.id, event.seq, error.message)
                continue
            if decision.run_write is RunWrite.NONE:
                continue
            chained.append(decision)
            run = decision.run
            attempt = decision.attempt or attempt
        return chain(chained) if chained else None

    async def _one_by_one(
        self, loaded: dict[str, Loaded], by_attempt: dict[str, list[pb.RuntimeEvent]], actor: Actor
    ) -> list[Result]:
        results: list[Result] = []
        for attempt_id, batch in by_attempt.items():
            item = loaded.get(attempt_id)
            if item is None:
                continue
            for event in batch:
                fresh = await self._transitions.reader.load(item.run.id, attempt_id)
                if fresh is None or fresh.attempt is None:
                    break
                if not _token_ok(event, fresh.attempt, self._transitions.context().now_ms):
                    continue
                command = command_for(event, item.run.id, actor)
                if command is None:
                    continue
                try:
                    results.append(await self._transitions.execute(command))
                except DomainError as error:
                    log.info("event %s/%s refused: %s", attempt_id, event.seq, error.message)
        return results


def _sent_by_its_runtime(item: Loaded, instance_id: str, owner_id: str) -> bool:
    attempt = item.attempt
    return (
        attempt is not None
        and attempt.runtime_instance_id == instance_id
        and owner_id in (attempt.owner_id, ANY_OWNER)
    )


def _authorized(event: pb.RuntimeEvent, attempt: Attempt, now_ms: int) -> bool:
    """Its callback token is the attempt's and valid now; for a finished attempt the right
    token counts whatever its age (nothing can change any more: the event is recorded as
    late and acknowledged, so a runtime back after days can forget it)."""
    if _token_ok(event, attempt, now_ms):
        return True
    stored = attempt.callback_token_hash
    return attempt.status.terminal and callback_token_valid(event.callback_token, stored, None, 0)


def _token_ok(event: pb.RuntimeEvent, attempt: Attempt, now_ms: int) -> bool:
    return callback_token_valid(
        event.callback_token,
        attempt.callback_token_hash,
        attempt.callback_token_expires_at_ms,
        now_ms,
    )
