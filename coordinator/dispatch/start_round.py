"""The Starts of one claim round go out together: every attempt of the round hands its Start
in (after its answer's future is registered) or drops out, and the last one sends them all in
one message to a runtime that reads batches (Session.send_starts). Each attempt keeps its own
dispatch: its span, its future, its start timeout, counted from the send."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from google.protobuf import struct_pb2
from truerun.v1 import runtime_service_pb2 as pb

from coordinator.dispatch.capacity_port import ClaimedStart
from coordinator.dispatch.sessions import Session
from kernel.telemetry import current_traceparent


class StartRound:
    def __init__(self, session: Session, attempt_ids: Iterable[str]) -> None:
        self._session = session
        self._waiting = set(attempt_ids)
        self._starts: list[pb.Start] = []
        #: Set once the round's Starts are handed to the stream.
        self.sent = asyncio.Event()
        if not self._waiting:
            self.sent.set()

    def add(self, attempt_id: str, start: pb.Start) -> None:
        """The attempt's Start is ready (its fence stored, its future registered)."""
        if attempt_id in self._waiting:
            self._starts.append(start)
            self._done(attempt_id)

    def drop(self, attempt_id: str) -> None:
        """The attempt sends no Start (its fence failed, its task ended): the round does not
        wait for it. A no-op once the attempt's Start was added."""
        if attempt_id in self._waiting:
            self._done(attempt_id)

    def _done(self, attempt_id: str) -> None:
        self._waiting.discard(attempt_id)
        if not self._waiting:
            if self._starts:
                self._session.send_starts(self._starts)
            self.sent.set()


def start_message(item: ClaimedStart, token: str) -> pb.Start:
    """The Start of one claimed attempt, in the current span's trace (tracing on)."""
    return pb.Start(
        run_id=item.run_id,
        attempt_id=item.attempt_id,
        runtime_task_id=item.runtime_task_id,
        callback_token=token,
        spec=item.spec,
        front_of_queue=item.front_of_queue,
        workspace_path=item.workspace_path,
        self_fence_after_ms=_self_fence_after_ms(item.spec),
        trace_parent=current_traceparent(),
    )


def _self_fence_after_ms(spec: struct_pb2.Struct) -> int:
    """The run's opt-in to self-fencing (spec key ``self_fence_after_ms``, validated at
    CreateRun); 0: the run names none (the agent's own default applies)."""
    value = spec.fields.get("self_fence_after_ms")
    if value is None or value.WhichOneof("kind") != "number_value":
        return 0
    return max(0, int(value.number_value))
