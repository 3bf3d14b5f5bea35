"""A lost attempt and the retry policy's answer, committed together.

An attempt becomes lost on proof that its task is gone (the runtime instance that held it
says "not found", a new instance of its lineage replaced it) or by the ``lost_after``
policy. An idempotent run then gets a new attempt at once (a counted recovery: past
``max_recoveries`` the run is dead-lettered); any other run stays lost until a person
resolves it. Both decisions go into one transaction, so a crash never leaves an idempotent
run lost with nobody to retry it.
"""

from __future__ import annotations

import logging

from coordinator.domain import commands as c
from coordinator.domain.model import Actor
from coordinator.domain.states import RunStatus
from coordinator.service.transitions import DoorTx, Result, Transitions
from kernel.errors import DomainError, VersionConflict

log = logging.getLogger(__name__)

TRIES = 3


async def lose_in(
    transitions: Transitions,
    tx: DoorTx,
    command: c.RunCommand,
    retrier: Actor,
    max_recoveries: int,
) -> list[Result]:
    """Apply ``command`` (one that can make the run lost) inside the caller's transaction
    and, when the run is then lost and idempotent, its recovery retry."""
    results = [await transitions.execute_in(tx, command)]
    run = results[0].run
    if run.status is RunStatus.LOST and run.idempotent:
        retry = c.RetryAttempt(run.id, retrier, recovery=True, max_recoveries=max_recoveries)
        try:
            results.append(await transitions.execute_in(tx, retry))
        except DomainError as error:  # decided before any write: the loss still stands
            log.info("lost run %s not retried: %s", run.id, error.message)
    return results


async def lose(
    transitions: Transitions, command: c.RunCommand, retrier: Actor, max_recoveries: int
) -> list[Result]:
    """The same in a transaction of its own, decided again when the run changed meanwhile."""
    for _ in range(TRIES):
        try:
            async with transitions.transaction([f"run:{command.run_id}"]) as tx:
                results = await lose_in(transitions, tx, command, retrier, max_recoveries)
        except VersionConflict:
            continue
        transitions.published(results)
        return results
    raise VersionConflict(
        f"run {command.run_id} kept changing; gave up after {TRIES} tries", run_id=command.run_id
    )
