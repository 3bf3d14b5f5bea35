"""Start dispatch (seed A §5, §13): claim -> persist the start fence -> send Start -> the
runtime's answer. Accepted is "accepted", never "running". A refusal before start puts the
same attempt back in the queue. No answer, or a broken stream, after the fence is
"dispatch unknown": the attempt shows unknown and keeps its capacity; Start is never sent
twice for one attempt.

Cancels are signalled only after the cancel request is committed, re-sent when the
runtime reconnects, and re-sent on the stream while unconfirmed with a per-attempt
exponential backoff (1 s doubling to 60 s) until the attempt ends.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from truerun.v1 import runtime_service_pb2 as pb

from coordinator.dispatch.capacity_port import QUEUE_DRAINED, ClaimedStart, Claims
from coordinator.dispatch.ingest import EventIngest
from coordinator.dispatch.sessions import Session, Sessions
from coordinator.dispatch.start_round import StartRound, start_message
from coordinator.dispatch.tokens import token_hash
from coordinator.domain import commands as c
from coordinator.domain.model import Actor, Attempt
from coordinator.domain.staleness import START_UNANSWERED, start_unanswered
from coordinator.domain.states import ActorType, SyncState
from coordinator.service.run_traces import run_trace_parent
from coordinator.service.transitions import Result, Transitions
from kernel.config import CLAIM_GATHER_MS
from kernel.errors import DomainError
from kernel.ids import new_token, new_tokens
from kernel.loops import failed, supervise
from kernel.telemetry import span

log = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 1.0
CLAIMS_PER_ROUND = 64  # a round claims at most the observed free slots anyway
CANCEL_RESEND_FIRST_S = 1.0  # an unconfirmed Cancel goes again after 1 s, 2 s, 4 s, ...
# An unanswered Inspect (or one whose answer proved nothing) goes again after 5 s, 10 s, ...:
# the runtime may take a moment to answer (a command that just ended).
INSPECT_RESEND_FIRST_S = 5.0
RESEND_MAX_S = 60.0  # ... at most 60 s apart
# Nothing due here: look this often for cancels and unknown attempts that another process
# (a replica, the reconciler) recorded for this runtime.
RESEND_SCAN_IDLE_S = 5.0
# An accepted Start whose first event has not arrived this long after the answer: the answer
# alone is recorded as the evidence of acceptance (waiting_runtime, not starting).
ACCEPTED_EVENT_GRACE_S = 1.0
# A transient refusal (full, draining) pauses claims for that runtime 1 s, 2 s, ... 30 s.
REFUSAL_PAUSE_FIRST_S = 1.0
REFUSAL_PAUSE_MAX_S = 30.0


class Dispatcher:
    def __init__(
        self,
        transitions: Transitions,
        claims: Claims,
        ingest: EventIngest,
        sessions: Sessions,
        start_timeout_s: float = 10.0,
        lease_ttl_ms: int = 30_000,
        cancel_grace_ms: int = 5_000,
        max_recoveries: int = 5,
        claim_gather_ms: int = CLAIM_GATHER_MS,
    ) -> None:
        self._transitions = transitions
        #: After a round that claimed some runs, not a full round, and ran the queue dry: wait
        #: this long before the next, so the runs created meanwhile go out together
        #: (TRUERUN_CLAIM_GATHER_MS).
        self._gather_s = max(0, claim_gather_ms) / 1000
        #: How often one run may be recovered (a lost attempt retried by policy) before the
        #: next recovery dead-letters it (0: no limit); the reconciler's limit, the same count.
        self.max_recoveries = max_recoveries
        self._claims = claims
        self._ingest = ingest
        self._sessions = sessions
        self._start_timeout_s = start_timeout_s
        self.start_timeout_ms = int(start_timeout_s * 1000)
        self.lease_ttl_ms = lease_ttl_ms
        self._cancel_grace_ms = cancel_grace_ms
        self._starts: set[asyncio.Task[None]] = set()
        self._claiming: set[asyncio.Task[tuple[int, bool]]] = set()
        self.draining = False

    # -- the loop per connected runtime -------------------------------------------------------

    async def serve(self, session: Session) -> None:
        actor = Actor(ActorType.SCHEDULER, f"dispatcher:{session.runtime_instance_id}")
        await self.resend_on_connect(session)
        resender = asyncio.create_task(self._resend_loop(session))
        try:
            await self._claim_loop(session, actor)
        finally:
            resender.cancel()
            await asyncio.gather(resender, return_exceptions=True)

    async def _claim_loop(self, session: Session, actor: Actor) -> None:
        loop = asyncio.get_running_loop()
        while not session.closed and not self.draining:
            if (pause := session.claims_paused_until - loop.time()) > 0:
                await asyncio.sleep(pause)  # the runtime refused for now: give it a moment
                continue
            session.wake.clear()
            claim = asyncio.ensure_future(self._claim(session, actor))
            self._claiming.add(claim)
            claimed, drained = 0, False
            try:
                claimed, drained = await claim
            except DomainError as error:
                log.warning("claim for %s failed: %s", session.runtime_instance_id, error)
            except grpc.aio.AioRpcError as error:  # the capacity service is away: wait, retry
                log.warning("claim for %s failed: %s", session.runtime_instance_id, error.code())
            except Exception:  # a database or Redis failure: logged, counted, retried; never
                # the end of claiming (nothing restarts it: tests/faults/test_dependency_outages.py)
                log.exception("claim for %s failed", session.runtime_instance_id)
                failed("dispatch claim")
            finally:
                self._claiming.discard(claim)
            if claimed and drained and self._gather_s > 0:  # drained: never a full round
                # The queue ran dry: a round's statements cost per round, not per run, so
                # let the runs created meanwhile gather (bench/README.md, 2026-12-05 and
                # 2026-12-06). An idle dispatcher claims at once.
                await asyncio.sleep(self._gather_s)
            elif claimed < CLAIMS_PER_ROUND:
                # Nothing claimed, or held back by capacity (device full, an agent at R, a
                # scope busy): gathering would only delay the next run; the end of an
                # attempt or a new run wakes the loop.
                try:
                    await asyncio.wait_for(session.wake.wait(), IDLE_POLL_SECONDS)
                except TimeoutError:
                    pass

    async def _claim(self, session: Session, actor: Actor) -> tuple[int, bool]:
        """One claim round: every attempt it claims is fenced in the claim's own commit with
        a callback token made here (only its hash leaves this process), so a Start goes out
        only after its fence is durable and none needs a write of its own. Returns how many
        it claimed and whether the queue ran dry (rather than the runtime's capacity)."""
        tokens = {token_hash(t): t for t in new_tokens(CLAIMS_PER_ROUND)}
        outcome = await self._claims.claim(
            session.owner_id,
            session.runtime_instance_id,
            session.device_ids[0],
            CLAIMS_PER_ROUND,
            self.lease_ttl_ms,
            list(tokens),
            session.projects,
        )
        # one Start message for the round (to a runtime that reads batches)
        round_ = StartRound(session, [item.attempt_id for item in outcome.claimed])
        for item in outcome.claimed:
            token = tokens.get(item.callback_token_hash, "")
            task = asyncio.create_task(self._start(session, item, actor, token, round_))
            supervise(task, "dispatch start", self._starts)  # a failure: logged, counted
        return len(outcome.claimed), outcome.blocked == QUEUE_DRAINED

    async def _start(
        self, session: Session, item: ClaimedStart, actor: Actor, token: str, round_: StartRound
    ) -> None:
        """The dispatch of one claimed attempt, as a span in its run's trace (tracing on)."""
        try:
            parent = await run_trace_parent(self._transitions.reader, item.run_id)
            attributes = {"truerun.run_id": item.run_id, "truerun.attempt_id": item.attempt_id}
            with span("dispatch start", attributes, parent=parent):
                await self._start_traced(session, item, actor, token, round_)
        finally:
            round_.drop(item.attempt_id)  # however it ended, the round never waits for it

    async def _start_traced(
        self, session: Session, item: ClaimedStart, actor: Actor, token: str, round_: StartRound
    ) -> None:
        if not token:  # claimed without a fence (a capacity service that sets none): fence now
            token = new_token()
            fence = c.StartFence(
                item.run_id,
                actor,
                lease_token=item.lease_token,
                callback_token_hash=token_hash(token),
            )
            try:
                await self._transitions.execute(fence)
            except DomainError as error:  # e.g. cancelled between claim and fence: nothing sent
                log.info("no Start for attempt %s: %s", item.attempt_id, error.message)
                return
        answer: asyncio.Future[pb.StartResult] = asyncio.get_running_loop().create_future()
        session.pending_starts[item.attempt_id] = answer
        first_event = session.awaiting_evidence[item.attempt_id] = asyncio.Event()
        try:
            await self._send_start(session, item, actor, token, answer, first_event, round_)
        finally:
            session.awaiting_evidence.pop(item.attempt_id, None)

    async def _send_start(
        self,
        session: Session,
        item: ClaimedStart,
        actor: Actor,
        token: str,
        answer: asyncio.Future[pb.StartResult],
        first_event: asyncio.Event,
        round_: StartRound,
    ) -> None:
        round_.add(item.attempt_id, start_message(item, token))
        await round_.sent.wait()  # the timeout counts from the round's send
        try:
            # asyncio.timeout, not wait_for: no task of its own per Start (issue #16)
            async with asyncio.timeout(self._start_timeout_s):
                result = await answer
        except (TimeoutError, ConnectionError) as error:
            why = (
                start_unanswered(self.start_timeout_ms)
                if isinstance(error, TimeoutError)
                else "the runtime's stream closed before it answered the start"
            )
            await self._unknown(item.run_id, item.attempt_id, actor, why)
            return
        finally:
            session.pending_starts.pop(item.attempt_id, None)
        runtime = Actor(ActorType.RUNTIME, session.runtime_instance_id)
        if result.accepted:
            session.refusal_gap_s = 0.0
            await self._accepted(item, runtime, first_event)
            return
        permanent = result.refusal == pb.START_REFUSAL_INVALID_SPEC
        if not permanent:
            loop_time = asyncio.get_running_loop().time()
            session.refused(loop_time, REFUSAL_PAUSE_FIRST_S, REFUSAL_PAUSE_MAX_S)
        rejected = c.DispatchRejected(
            item.run_id,
            item.attempt_id,
            item.runtime_task_id,
            result.seq,
            runtime,
            reason=result.reason or "refused without a reason",
            permanent=permanent,
            max_refusals=self.max_recoveries,
        )
        try:
            await self._transitions.execute(rejected)
        except DomainError as error:  # a late accept committed first: it stands
            log.warning("start rejection for %s not applied: %s", item.attempt_id, error.message)

    async def _accepted(
        self, item: ClaimedStart, runtime: Actor, first_event: asyncio.Event
    ) -> None:
        """An accepted Start is evidence of acceptance, event or not: when no event of the
        attempt follows the answer within a moment, the answer itself is recorded."""
        try:
            async with asyncio.timeout(ACCEPTED_EVENT_GRACE_S):
                await first_event.wait()
            return
        except TimeoutError:
            pass
        command = c.StartAccepted(item.run_id, runtime, attempt_id=item.attempt_id)
        try:
            await self._transitions.execute(command)
        except DomainError as error:  # it moved on meanwhile
            log.info("acceptance of %s not recorded: %s", item.attempt_id, error.message)

    async def _unknown(self, run_id: str, attempt_id: str, actor: Actor, why: str) -> None:
        command = c.DispatchUnknown(
            run_id, actor, reason=START_UNANSWERED, explanation=why, attempt_id=attempt_id
        )
        try:
            await self._transitions.execute(command)
        except DomainError as error:  # it moved on (e.g. an event arrived meanwhile)
            log.info("dispatch of run %s not marked unknown: %s", run_id, error.message)

    async def drain(self) -> None:
        """Graceful shutdown, first step: claim nothing more, and wait until every Start
        already sent has its answer (or its timeout) while the streams are still open, so a
        shutdown never turns a start into "dispatch unknown"."""
        self.draining = True
        for session in self._sessions.all():
            session.wake.set()
        await asyncio.gather(*self._claiming, return_exceptions=True)
        await asyncio.gather(*self._starts, return_exceptions=True)

    async def stop(self) -> None:
        for task in list(self._starts):
            task.cancel()
        await asyncio.gather(*self._starts, return_exceptions=True)

    # -- cancels and inspects ----------------------------------------------------------------

    def on_commit(self, result: Result) -> None:
        """Listens to every commit in this process: wakes dispatch and signals cancels."""
        types = {event.type for event in result.events}
        if types & _WAKING:
            for session in self._sessions.all():
                if session.owner_id == result.run.owner_id:
                    session.wake.set()
        attempt = result.attempt
        if "run.cancel_requested" in types and attempt is not None and attempt.fenced:
            self.send_cancel(attempt)
        if "attempt.sync_stale" in types and attempt is not None:
            self.send_inspect(attempt)

    def send_cancel(self, attempt: Attempt) -> None:
        if attempt.runtime_instance_id is None:
            return
        session = self._sessions.get(attempt.runtime_instance_id)
        if session is None:
            return  # not connected: sent again when it reconnects (and by the reconciler)
        self._send_cancel_on(session, attempt)

    def _send_cancel_on(self, session: Session, attempt: Attempt) -> None:
        # The runtime_task_id is the Cancel's fencing token: the runtime stops only the task
        # it started under that id for that attempt, and answers found=false otherwise.
        session.send(
            pb.ConnectResponse(
                cancel=pb.Cancel(
                    attempt_id=attempt.id,
                    runtime_task_id=attempt.runtime_task_id,
                    grace_ms=self._cancel_grace_ms,
                )
            )
        )
        session.record_send(session.cancels, attempt.id, CANCEL_RESEND_FIRST_S, RESEND_MAX_S)

    def send_inspect(self, attempt: Attempt) -> None:
        session = self._sessions.get(attempt.runtime_instance_id or "")
        if session is not None:
            self._send_inspect_on(session, attempt)

    def _send_inspect_on(self, session: Session, attempt: Attempt) -> None:
        session.ask(attempt.id)
        session.send(
            pb.ConnectResponse(
                inspect=pb.Inspect(attempt_id=attempt.id, runtime_task_id=attempt.runtime_task_id)
            )
        )
        session.record_send(session.inspects, attempt.id, INSPECT_RESEND_FIRST_S, RESEND_MAX_S)

    async def _resend_loop(self, session: Session) -> None:
        """While a cancel is requested and the attempt has not ended, its Cancel goes again
        on this stream, 1 s after the last one, then 2 s, 4 s, ... at most 60 s apart; while
        an attempt is unknown (no cancel requested), its Inspect goes again 5 s, 10 s, ...
        after the last. An attempt that ended, or is in sync again, loses its backoff. Looks
        every few seconds also when nothing is known here: a cancel requested on another
        replica, an attempt the reconciler process found unknown."""
        loop = asyncio.get_running_loop()
        while not session.closed:
            wait = RESEND_SCAN_IDLE_S
            pending = [*session.cancels.values(), *session.inspects.values()]
            if pending:
                due = min(s.sent_at + s.gap_s for s in pending)
                wait = min(max(due - loop.time(), 0.0), RESEND_SCAN_IDLE_S)
            session.resent.clear()
            try:
                await asyncio.wait_for(session.resent.wait(), wait)
                continue  # one just went out: recompute the next wake-up
            except TimeoutError:
                pass
            try:
                await self._resend_due(session)
            except Exception:  # a database hiccup: the next round tries again
                log.exception("re-send for %s failed", session.runtime_instance_id)

    async def _resend_due(self, session: Session) -> None:
        reader = self._transitions.reader
        started = await reader.started_attempts(session.owner_id, session.runtime_instance_id)
        cancels = {a.id: a for a in started if a.cancel_requested_at_ms is not None}
        unknown = {
            a.id: a
            for a in started
            if a.sync_state is SyncState.STALE and a.cancel_requested_at_ms is None
        }
        now = asyncio.get_running_loop().time()
        for sent, wanted, send in (
            (session.cancels, cancels, self._send_cancel_on),
            (session.inspects, unknown, self._send_inspect_on),
        ):
            for attempt_id in [a for a in sent if a not in wanted]:
                del sent[attempt_id]  # ended (confirmed), in sync again, or nothing to repeat
            for attempt in wanted.values():
                last = sent.get(attempt.id)
                if last is None or now >= last.sent_at + last.gap_s:
                    send(session, attempt)

    async def resend_on_connect(self, session: Session) -> None:
        """On (re)connect: every cancel not yet confirmed goes again, and every started
        attempt of the instance is inspected. A stream being back proves nothing about the
        tasks: the runtime may have restarted without them (a whole worker died: it answers
        LOST), or a Start may have died with an earlier coordinator (NOT_FOUND, or
        ACCEPTED if it arrived). Its answers, not the reconnect, bring each back in sync."""
        reader = self._transitions.reader
        for attempt in await reader.started_attempts(session.owner_id, session.runtime_instance_id):
            if attempt.cancel_requested_at_ms is not None:
                self.send_cancel(attempt)
            self.send_inspect(attempt)


# A run became claimable, or an attempt stopped holding a slot.
_WAKING = frozenset(
    f"run.{s}" for s in "queued succeeded failed cancelled timed_out lost retry_wait".split()
)
