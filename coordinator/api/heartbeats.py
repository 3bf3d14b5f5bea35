"""Heartbeats on a runtime's stream: a capacity observation, lease renewals for the tasks
the heartbeat lists (and nothing else: coordinator/domain/staleness.py), unknown for a
started task it stops listing, and orphans (a task truerun holds finished or elsewhere)."""

from __future__ import annotations

import logging

import grpc
from truerun.v1 import runtime_service_pb2 as pb

from coordinator.api.convert import observation_from_proto
from coordinator.dispatch.capacity_port import ObservationReporter
from coordinator.dispatch.dispatcher import Dispatcher
from coordinator.dispatch.sessions import Session, Sessions
from coordinator.domain import commands as c
from coordinator.domain import staleness
from coordinator.domain.commands import CALLBACK_TOKEN_TTL_MS
from coordinator.domain.model import RUNTIME_TASK_PREFIX, Actor
from coordinator.domain.states import ActorType, AttemptStatus
from coordinator.service.transitions import Transitions
from kernel.errors import DomainError
from kernel.observation import Observation
from kernel.records import replace

log = logging.getLogger(__name__)


class Heartbeats:
    def __init__(
        self,
        sessions: Sessions,
        dispatcher: Dispatcher,
        observations: ObservationReporter,
        transitions: Transitions,
        grace_ms: int,
    ) -> None:
        """``grace_ms``: how long a confirmed task may go unlisted before it is missing."""
        self._sessions = sessions
        self._dispatcher = dispatcher
        self._observations = observations
        self._transitions = transitions
        self._reader = transitions.reader
        self._grace_ms = grace_ms

    async def handle(self, session: Session, heartbeat: pb.Heartbeat) -> None:
        observation = observation_from_proto(heartbeat.observation)
        if (observation.owner_id, observation.runtime_instance_id) != (
            session.owner_id,
            session.runtime_instance_id,
        ):
            log.warning(
                "heartbeat for another runtime on %s's stream ignored", session.runtime_instance_id
            )
            return
        # The Hello's facts travel with each observation, so every replica's list of the
        # runtimes (CapacityService.ListRuntimes) reads them from the observation store.
        observation = replace(
            observation, agent_version=session.agent_version, lineage=session.lineage
        )
        try:
            stored = await self._observations.report(observation)
        except DomainError as error:
            log.warning("observation of %s rejected: %s", session.runtime_instance_id, error)
            return
        except grpc.aio.AioRpcError as error:  # the capacity service refused it, or is away
            log.warning("observation of %s not stored: %s", session.runtime_instance_id, error)
            return
        try:
            await self._vouch(session, stored)
        except Exception:  # the next heartbeat renews again; the stream must go on
            log.exception("lease renewal for %s failed", session.runtime_instance_id)
        await self._orphans(session, stored.active_task_ids)
        session.wake.set()

    async def _vouch(self, session: Session, observation: Observation) -> None:
        """A heartbeat renews the leases of the tasks it lists, and nothing else shows on a
        run; a started attempt it should list and does not turns unknown with that reason,
        and the runtime is asked about it (coordinator/domain/staleness.py)."""
        owner, instance = session.owner_id, session.runtime_instance_id
        now = observation.received_at_ms
        vouched = staleness.vouch(
            await self._reader.started_attempts(owner, instance),
            {*observation.active_task_ids, *observation.queued_task_ids},
            lists_queue=observation.queued == len(observation.queued_task_ids),
            now_ms=now,
            start_timeout_ms=self._dispatcher.start_timeout_ms,
            grace_ms=self._grace_ms,
        )
        await self._transitions.renew_leases(
            owner,
            instance,
            vouched.renew,
            now,
            now + self._dispatcher.lease_ttl_ms,
            now + CALLBACK_TOKEN_TTL_MS,  # vouched for: its authority lasts
        )
        actor = Actor(ActorType.RUNTIME, instance)
        for attempt in vouched.missing:
            command = c.DispatchUnknown(
                attempt.run_id,
                actor,
                reason=staleness.NOT_LISTED,
                explanation=staleness.not_listed(instance, now),
                attempt_id=attempt.id,
            )
            try:  # committed, the dispatcher sends the Inspect (on_commit: sync_stale)
                await self._transitions.execute(command)
            except DomainError as error:  # it moved on meanwhile (finished, retried)
                log.info("attempt %s not marked unknown: %s", attempt.id, error.message)

    async def _orphans(self, session: Session, active_task_ids: tuple[str, ...]) -> None:
        """Seed A §10: a runtime running a task truerun holds finished, unstarted or on
        another runtime gets a Cancel; truerun's state stays and the report is recorded
        (once per stream)."""
        attempt_ids = [
            t.removeprefix(RUNTIME_TASK_PREFIX)
            for t in active_task_ids
            if t.startswith(RUNTIME_TASK_PREFIX)
        ]
        if not attempt_ids:
            return
        loaded = await self._reader.load_attempts(attempt_ids)
        for attempt_id, item in loaded.items():
            attempt = item.attempt
            if attempt is not None and attempt.owner_id != session.owner_id:
                # another owner's task: evidence of nothing, never written to its run
                self._sessions.refused["heartbeat_task_of_another_owner"] += 1
                continue
            if attempt is None or (
                attempt.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING)
                and attempt.runtime_instance_id == session.runtime_instance_id
            ):
                continue
            self._dispatcher.send_cancel(
                replace(attempt, runtime_instance_id=session.runtime_instance_id)
            )
            if attempt_id in session.reported_orphans:
                continue
            session.reported_orphans.add(attempt_id)
            report = c.OrphanReported(
                item.run.id,
                Actor(ActorType.RUNTIME, session.runtime_instance_id),
                attempt_id=attempt_id,
                runtime_instance_id=session.runtime_instance_id,
            )
            try:
                await self._transitions.execute(report)
            except DomainError as error:
                log.warning("orphan %s not recorded: %s", attempt_id, error.message)
