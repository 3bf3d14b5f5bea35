"""Operator commands that need more than one transition, taken together or not at all."""

from __future__ import annotations

from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import ActorType, RunStatus
from coordinator.service.transitions import Result, Transitions
from coordinator.store.base import RequestRecord
from coordinator.store.snapshots import run_snapshot


async def resolve(
    transitions: Transitions, command: c.Resolve, request: RequestRecord | None = None
) -> Result:
    """Resolve an unknown or lost attempt. ``not started`` on an unknown attempt is two
    decisions (the attempt is lost, then the run is queued on a new attempt) in one
    transaction, so no one ever sees the run stuck in between."""
    if command.resolved_as is not c.ResolveAs.NOT_STARTED:
        return await transitions.execute(command, request)
    async with transitions.transaction([f"run:{command.run_id}"]) as tx:
        results = [await transitions.execute_in(tx, command)]
        if results[0].run.status is RunStatus.LOST:
            retry = c.RetryAttempt(command.run_id, Actor(ActorType.OPERATOR, command.actor.id))
            results.append(await transitions.execute_in(tx, retry))
        if request is not None:
            last = results[-1]
            await transitions.record_request_in(tx, request, run_snapshot(last.run, last.attempt))
    transitions.published(results)
    return results[-1]
