"""Runtime events in: bound to the attempt, its runtime task id, the sending runtime instance
and the callback token; applied through the transition service; acknowledged by seq once
processed (applied, ignored as late, or refused). A refused event changes nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from truerun.v1 import runtime_service_pb2 as pb

from coordinator.api.convert import struct_to_dict
from coordinator.dispatch.tokens import ANY_OWNER, callback_token_valid
from coordinator.domain import commands as c
from coordinator.domain.errors import DomainError
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType
from coordinator.service.transitions import Result, Transitions
from services.ids import now_ms

log = logging.getLogger(__name__)

_OUTCOMES = {
    pb.RUNTIME_EVENT_TYPE_SUCCEEDED: c.RuntimeOutcome.SUCCEEDED,
    pb.RUNTIME_EVENT_TYPE_FAILED: c.RuntimeOutcome.FAILED,
    pb.RUNTIME_EVENT_TYPE_CANCELLED: c.RuntimeOutcome.CANCELLED,
    pb.RUNTIME_EVENT_TYPE_TIMED_OUT: c.RuntimeOutcome.TIMED_OUT,
}
_NOTES = {
    pb.RUNTIME_EVENT_TYPE_OUTPUT: c.NoteKind.OUTPUT,
    pb.RUNTIME_EVENT_TYPE_SIGNALLED: c.NoteKind.SIGNALLED,
}
TERMINAL_TYPES = frozenset(_OUTCOMES)


@dataclass(frozen=True, slots=True)
class Ingested:
    acks: dict[str, int]  # attempt id -> highest processed seq
    results: list[Result]


def command_for(event: pb.RuntimeEvent, run_id: str, actor: Actor) -> c.RuntimeCommand | None:
    base = (run_id, event.attempt_id, event.runtime_task_id, event.seq, actor)
    kind = event.type
    if kind == pb.RUNTIME_EVENT_TYPE_ACCEPTED:
        return c.RuntimeAccepted(*base)
    if kind == pb.RUNTIME_EVENT_TYPE_RUNNING:
        return c.RuntimeRunning(*base)
    if kind in _NOTES:
        details = struct_to_dict(event.payload)
        if event.turn_status:
            details["turn_status"] = pb.TurnStatus.Name(event.turn_status)
        return c.RuntimeNote(*base, kind=_NOTES[kind], details=details)
    if kind in _OUTCOMES:
        return c.RuntimeResult(
            *base,
            outcome=_OUTCOMES[kind],
            exit_code=event.exit_code if event.HasField("exit_code") else None,
            error_code=event.error_code or None,
            error_summary=event.error_summary or None,
        )
    return None


class EventIngest:
    def __init__(self, transitions: Transitions, clock: Callable[[], int] = now_ms) -> None:
        self._transitions = transitions
        self._clock = clock
        self._run_of: dict[str, str] = {}

    def remember(self, attempt_id: str, run_id: str) -> None:
        self._run_of[attempt_id] = run_id

    async def ingest(
        self, instance_id: str, events: Sequence[pb.RuntimeEvent], owner_id: str
    ) -> Ingested:
        """``owner_id``: whom the sender's runtime token acts for (ANY_OWNER: anyone)."""
        acks: dict[str, int] = {}
        results: list[Result] = []
        actor = Actor(ActorType.RUNTIME, instance_id)
        for event in events:
            result = await self._one(instance_id, owner_id, event, actor)
            if result is not None:
                results.append(result)
            acks[event.attempt_id] = max(acks.get(event.attempt_id, 0), event.seq)
        return Ingested(acks, results)

    async def _one(
        self, instance_id: str, owner_id: str, event: pb.RuntimeEvent, actor: Actor
    ) -> Result | None:
        run_id = self._run_of.get(event.attempt_id)
        if run_id is None:
            run_id = await self._transitions.store.run_of_attempt(event.attempt_id)
            if run_id is None:
                log.warning("event for unknown attempt %s refused", event.attempt_id)
                return None
            self._run_of[event.attempt_id] = run_id
        loaded = await self._transitions.store.load(run_id, event.attempt_id)
        attempt = loaded.attempt if loaded else None
        if (
            attempt is None
            or attempt.runtime_instance_id != instance_id
            or owner_id not in (attempt.owner_id, ANY_OWNER)
        ):
            log.warning(
                "event for attempt %s from runtime %s refused: not its runtime",
                event.attempt_id,
                instance_id,
            )
            return None
        if not callback_token_valid(
            event.callback_token,
            attempt.callback_token_hash,
            attempt.callback_token_expires_at_ms,
            self._clock(),
        ):
            log.warning("event for attempt %s refused: callback token", event.attempt_id)
            return None
        command = command_for(event, run_id, actor)
        if command is None:
            log.warning("event of unknown type %s refused", event.type)
            return None
        try:
            return await self._transitions.execute(command)
        except DomainError as error:
            log.info("event %s/%s refused: %s", event.attempt_id, event.seq, error.message)
            return None
